# What `cmake --install build --prefix P` puts under P, and the packages made from it:
#   bin/               kolorun, kolo-bench, kolo-trace
#   lib/               libkolo and libkolo_framework (.so with SONAME libkolo.so.MAJOR.MINOR,
#                      or .a), lib/cmake/Kolo/ (find_package(Kolo)), lib/pkgconfig/ (kolo.pc,
#                      kolo-framework.pc)
#   include/kolo/      the public core API, and framework.h: the training stack in one include
#   include/kolo_framework/framework/   the training stack's headers ("framework/tensor.h")
# `cpack -G DEB` in the build folder makes kolo_<version>_<arch>.deb of the same files
# (scripts/package-deb.sh builds one that installs on a plain Debian 12).
include(CMakePackageConfigHelpers)

set(KOLO_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/Kolo)
set(KOLO_FRAMEWORK_INCLUDE_DIR ${CMAKE_INSTALL_INCLUDEDIR}/kolo_framework)

# An installed libkolo finds its CUDA and MPI libraries where the build found them, and
# libkolo_framework finds libkolo beside itself.
set_target_properties(kolo kolo_framework PROPERTIES INSTALL_RPATH "$ORIGIN"
                      INSTALL_RPATH_USE_LINK_PATH TRUE)
set_target_properties(kolo_framework PROPERTIES EXPORT_NAME framework)

install(TARGETS kolo kolo_framework EXPORT KoloTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS kolorun kolo-bench kolo-trace RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/kolo DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h")
install(FILES ${PROJECT_SOURCE_DIR}/framework/include/kolo/framework.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kolo)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/framework/
        DESTINATION ${KOLO_FRAMEWORK_INCLUDE_DIR}/framework
        FILES_MATCHING PATTERN "*.h"
        PATTERN "bench" EXCLUDE PATTERN "include" EXCLUDE PATTERN "test_*.h" EXCLUDE
        PATTERN "*_test.h" EXCLUDE)

# The CMake package: find_package(Kolo 0.2 CONFIG [COMPONENTS ...]).
install(EXPORT KoloTargets NAMESPACE Kolo:: DESTINATION ${KOLO_CMAKE_DIR})
set(KOLO_CONFIG_SHARED ${BUILD_SHARED_LIBS})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/KoloConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/package/KoloConfig.cmake
                              INSTALL_DESTINATION ${KOLO_CMAKE_DIR})
# 0.x releases change the API between minor versions: 0.2 accepts 0.2.*, not 0.3.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/package/KoloConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/package/KoloConfig.cmake
              ${PROJECT_BINARY_DIR}/package/KoloConfigVersion.cmake
        DESTINATION ${KOLO_CMAKE_DIR})

# pkg-config, for builds without CMake. A static libkolo lists what it links in Libs.private.
function(kolo_pkg_config_libs out)
  set(flags)
  foreach(lib ${ARGN})
    if(lib MATCHES "^/")
      list(APPEND flags ${lib})
    elseif(lib STREQUAL "Threads::Threads")
      list(APPEND flags -pthread)
    endif()
  endforeach()
  list(JOIN flags " " joined)
  set(${out} "${joined}" PARENT_SCOPE)
endfunction()
set(kolo_pc_core_private ${CMAKE_THREAD_LIBS_INIT} ${ZLIB_LIBRARIES})  # zlib: .gz timelines
if(KOLO_HAVE_MPI)
  list(APPEND kolo_pc_core_private ${MPI_CXX_LIBRARIES})
endif()
if(KOLO_HAVE_CUDA)
  list(APPEND kolo_pc_core_private ${CUDA_cudart_LIBRARY})
endif()
set(kolo_pc_fw_private ${KOLO_OPENBLAS_LIBRARY} ${ZLIB_LIBRARIES})
if(KOLO_HAVE_CUDA)
  list(APPEND kolo_pc_fw_private ${CUDA_cublas_LIBRARY} ${CUDA_cublasLt_LIBRARY}
       ${KOLO_CUDNN_LIBRARY})
endif()
kolo_pkg_config_libs(KOLO_PC_CORE_PRIVATE Threads::Threads ${kolo_pc_core_private})
kolo_pkg_config_libs(KOLO_PC_FRAMEWORK_PRIVATE ${kolo_pc_fw_private})
set(KOLO_PC_FRAMEWORK_CFLAGS "")
if(KOLO_HAVE_CUDA)
  set(KOLO_PC_FRAMEWORK_CFLAGS "-DKOLO_HAVE_CUDA=1")
endif()
# A program linked with these flags finds the shared libraries at run time through an rpath to
# libdir, without LD_LIBRARY_PATH; not for a libdir the dynamic loader searches anyway (/usr/lib
# of a package), where an rpath would only be noise in every program built against it.
set(KOLO_PC_RPATH "-Wl,-rpath,\${libdir} ")
if(CMAKE_INSTALL_FULL_LIBDIR IN_LIST CMAKE_CXX_IMPLICIT_LINK_DIRECTORIES OR
   CMAKE_INSTALL_FULL_LIBDIR IN_LIST CMAKE_PLATFORM_IMPLICIT_LINK_DIRECTORIES)
  set(KOLO_PC_RPATH "")
endif()
# The files find the prefix from their own place, so that an install can move: two folders up
# from lib/pkgconfig, three from Debian's lib/x86_64-linux-gnu/pkgconfig.
file(RELATIVE_PATH KOLO_PC_UP_TO_PREFIX ${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig
     ${CMAKE_INSTALL_PREFIX})
# No trailing slash: libdir, and so the rpath a program keeps, reads ".../lib/pkgconfig/../../lib".
string(REGEX REPLACE "/$" "" KOLO_PC_UP_TO_PREFIX "${KOLO_PC_UP_TO_PREFIX}")
foreach(pc kolo kolo-framework)
  configure_file(${PROJECT_SOURCE_DIR}/cmake/${pc}.pc.in ${PROJECT_BINARY_DIR}/package/${pc}.pc
                 @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/package/${pc}.pc
          DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endforeach()

# Debian package. Its dependencies come from dpkg-shlibdeps, which needs every library the
# binaries load to belong to a Debian package: the CUDA toolkit in /usr/local/cuda does not, so
# packages are made from a build without CUDA (scripts/package-deb.sh).
set(CPACK_PACKAGE_NAME kolo)
set(CPACK_PACKAGE_VENDOR "The Kolo developers")
set(CPACK_PACKAGE_CONTACT "The Kolo developers <kolo@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "Data-parallel deep-learning training: collectives, launcher and training stack")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_GENERATOR DEB)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# Headers need no other package's headers; a C++20 compiler and CMake or pkg-config to use them.
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "cmake, g++ (>= 4:12), pkg-config")
if(KOLO_HAVE_MPI)
  string(APPEND CPACK_DEBIAN_PACKAGE_RECOMMENDS ", openmpi-bin")  # mpirun
endif()
if(KOLO_HAVE_CUDA)
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS OFF)
  message(STATUS "Kolo: a .deb of this build (with CUDA) declares no library dependencies; "
                 "scripts/package-deb.sh makes one without CUDA that does")
endif()
include(CPack)
