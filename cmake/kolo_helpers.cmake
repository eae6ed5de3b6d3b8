# kolo_library(NAME SOURCES ... [DEPS ...]): a static library whose headers are included as
# "folder/file.h" from the source root and "kolo/..." from include/.
function(kolo_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/include)
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
endfunction()

# kolo_test(NAME SOURCES ... [DEPS ...] [LABELS ...] [TIMEOUT s] [RUN_SERIAL]): a GoogleTest
# binary in build/bin, registered with CTest test by test. RUN_SERIAL keeps tests that start
# several processes from running beside others on a small machine.
function(kolo_test name)
  cmake_parse_arguments(ARG "RUN_SERIAL" "TIMEOUT" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/include)
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 120)
  endif()
  if(NOT ARG_LABELS)
    set(ARG_LABELS unit)
  endif()
  set(serial FALSE)
  if(ARG_RUN_SERIAL)
    set(serial TRUE)
  endif()
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60
                       PROPERTIES LABELS "${ARG_LABELS}" TIMEOUT ${ARG_TIMEOUT} RUN_SERIAL ${serial})
endfunction()

# kolo_backend(NAME SOURCES ... [DEPS ...]): the library kolo_backend_<NAME> of one folder of
# backends/, recorded in the build's list of backends (common/build_info.h, written at the end
# of the top-level CMakeLists.txt). A folder whose requirements are missing returns before
# calling it, and the backend is then not part of the build. NAME must be the folder's name:
# the registry's line for the backend names backend_entry_<folder>() (backends/registry.h).
function(kolo_backend name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  get_filename_component(folder ${CMAKE_CURRENT_SOURCE_DIR} NAME)
  if(NOT name STREQUAL folder)
    message(FATAL_ERROR "kolo_backend(${name}) in backends/${folder}: the name must be the "
                        "folder's name, '${folder}'")
  endif()
  kolo_library(kolo_backend_${name} SOURCES ${ARG_SOURCES} DEPS ${ARG_DEPS})
  set_property(GLOBAL APPEND PROPERTY KOLO_BUILT_BACKENDS ${name})
endfunction()

# Writes common/build_info.cc (see common/build_info.h) once every backend folder is configured.
function(kolo_write_build_info)
  get_property(backends GLOBAL PROPERTY KOLO_BUILT_BACKENDS)
  list(SORT backends)
  set(quoted)
  foreach(b ${backends})
    list(APPEND quoted "\"${b}\"")
  endforeach()
  list(JOIN quoted ", " KOLO_BUILT_BACKENDS_CXX)
  foreach(c MPI CUDA NCCL)
    if(KOLO_HAVE_${c})
      set(KOLO_HAVE_${c}_CXX true)
    else()
      set(KOLO_HAVE_${c}_CXX false)
    endif()
  endforeach()
  configure_file(${PROJECT_SOURCE_DIR}/cmake/build_info.cc.in
                 ${PROJECT_BINARY_DIR}/generated/build_info.cc @ONLY)
  set(KOLO_BUILT_BACKENDS ${backends} PARENT_SCOPE)
endfunction()
