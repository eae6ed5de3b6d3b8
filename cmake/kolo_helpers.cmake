# Note [Include roots]. Kolo's headers are included by folder, "coordinator/runtime.h", and a
# target sees a folder's headers only if it links that folder's component: each top-level
# folder gets an include root <build>/include_roots/<folder>/ holding one symbolic link,
# <folder> -> the source folder. A component adds its root PUBLIC (its dependents may include
# its headers) or, with INTERNAL, PRIVATE. So an include against the layering (the framework
# reaching into common/, anything into coordinator/) fails to compile, as does one of a
# component that is not linked. The public API, include/kolo/, is visible to all. Two headers
# of common/ cross the layering, each inline with nothing to link, visible privately to a target
# that asks for it with kolo_common_header(): thread_annotations.h (the framework's locking is
# checked by Clang's analysis like the core's) and cuda_device_guard.h (the framework's CUDA
# code restores the caller's device as the core's does), without the framework's installed
# headers depending on them.
#
# kolo_folder_root(OUT): the include root of the current source folder's top-level folder.
function(kolo_folder_root out)
  file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR})
  string(REGEX REPLACE "/.*" "" folder "${rel}")
  set(root ${PROJECT_BINARY_DIR}/include_roots/${folder})
  if(NOT EXISTS ${root}/${folder})
    file(MAKE_DIRECTORY ${root})
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${folder} ${root}/${folder} SYMBOLIC)
  endif()
  set(${out} ${root} PARENT_SCOPE)
endfunction()

# kolo_common_header(TARGET HEADER): TARGET's sources may include "common/HEADER" (one of the
# two above, and no other header of common/); its own installed headers must not.
function(kolo_common_header target header)
  string(REGEX REPLACE "\\.h$" "" stem "${header}")
  set(root ${PROJECT_BINARY_DIR}/include_roots/${stem})
  if(NOT EXISTS ${root}/common/${header})
    file(MAKE_DIRECTORY ${root}/common)
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/common/${header} ${root}/common/${header} SYMBOLIC)
  endif()
  target_include_directories(${target} PRIVATE ${root})
endfunction()

# kolo_internal_includes(TARGET): TARGET (an executable or test of this folder) includes its own
# folder's headers and the public API.
function(kolo_internal_includes target)
  kolo_folder_root(root)
  target_include_directories(${target} PRIVATE ${root} ${PROJECT_SOURCE_DIR}/include)
endfunction()

# kolo_library(NAME SOURCES ... [DEPS ...] [INTERNAL] [EXPORT_ALL]): a static library of one
# component. DEPS are public dependencies. INTERNAL: the folder's headers are for itself and its
# tests only. The core's components are compiled with hidden visibility, so that libkolo.so
# exports only the public API (Note [Visibility] in docs/architecture.md); EXPORT_ALL keeps
# default visibility (the framework, whose headers are all its API).
function(kolo_library name)
  cmake_parse_arguments(ARG "INTERNAL;EXPORT_ALL" "" "SOURCES;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  kolo_folder_root(root)
  if(ARG_INTERNAL)
    target_include_directories(${name} PRIVATE ${root})
  else()
    target_include_directories(${name} PUBLIC ${root})
  endif()
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR}/include)
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
  if(NOT ARG_EXPORT_ALL)
    set_target_properties(${name} PROPERTIES CXX_VISIBILITY_PRESET hidden
                                             CUDA_VISIBILITY_PRESET hidden
                                             VISIBILITY_INLINES_HIDDEN ON)
  endif()
endfunction()

# kolo_umbrella_library(NAME PARTS ... [LINK ...]): one library (shared or static, by
# BUILD_SHARED_LIBS) made of the object files of the component libraries PARTS, with the
# project's version as its SONAME. LINK: what its objects need beyond each other (exported as
# link-only dependencies of a static library; private to a shared one).
function(kolo_umbrella_library name)
  cmake_parse_arguments(ARG "" "" "PARTS;LINK" ${ARGN})
  set(objects)
  foreach(part ${ARG_PARTS})
    list(APPEND objects $<TARGET_OBJECTS:${part}>)
  endforeach()
  add_library(${name} ${objects})
  set_target_properties(${name} PROPERTIES VERSION ${PROJECT_VERSION}
                        SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
  target_compile_features(${name} PUBLIC cxx_std_20)
  target_link_libraries(${name} PRIVATE ${ARG_LINK})
  if(BUILD_SHARED_LIBS AND NOT KOLO_SANITIZE AND NOT KOLO_FUZZ)
    # Every symbol the objects use must be resolved by the library's own dependencies (the
    # sanitizers' runtimes are linked into executables only, hence the exception).
    target_link_options(${name} PRIVATE LINKER:--no-undefined)
  endif()
endfunction()

# kolo_test(NAME SOURCES ... [DEPS ...] [DEFINITIONS ...] [DEPENDS ...] [LABELS ...] [TIMEOUT s]
# [RUN_SERIAL]): a GoogleTest binary in build/bin, registered with CTest test by test, when
# KOLO_BUILD_TESTS is on. DEFINITIONS: compile definitions (e.g. paths of the binaries a test
# runs, which DEPENDS then builds first). RUN_SERIAL keeps tests that start several processes
# from running beside others on a small machine.
function(kolo_test name)
  if(NOT KOLO_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(ARG "RUN_SERIAL" "TIMEOUT" "SOURCES;DEPS;DEFINITIONS;DEPENDS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  kolo_internal_includes(${name})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  target_compile_definitions(${name} PRIVATE ${ARG_DEFINITIONS})
  if(ARG_DEPENDS)
    add_dependencies(${name} ${ARG_DEPENDS})
  endif()
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

# kolo_backend(NAME SOURCES ... [DEPS ...] [KNOBS FILE]): the library kolo_backend_<NAME> of one
# folder of backends/, recorded in the build's list of backends (common/build_info.h, written at
# the end of the top-level CMakeLists.txt). A folder whose requirements are missing returns before
# calling it, and the backend is then not part of the build. NAME must be the folder's name:
# the registry's line for the backend names backend_entry_<folder>() (backends/registry.h).
# KNOBS: the folder's data-only file of knob rows (<name>_knobs.cc, defining
# `BackendKnobs backend_knobs_<name>()`, common/knobs.h). It is compiled into kolo_common, not
# into the backend's library, so that everything that links the knob registry sees the rows of
# every backend of the build: kolorun validates and prints them without linking any backend.
# Only that file sees the backends' include root (for its own header), not the rest of common/.
function(kolo_backend name)
  cmake_parse_arguments(ARG "" "KNOBS" "SOURCES;DEPS" ${ARGN})
  get_filename_component(folder ${CMAKE_CURRENT_SOURCE_DIR} NAME)
  if(NOT name STREQUAL folder)
    message(FATAL_ERROR "kolo_backend(${name}) in backends/${folder}: the name must be the "
                        "folder's name, '${folder}'")
  endif()
  kolo_library(kolo_backend_${name} SOURCES ${ARG_SOURCES} DEPS ${ARG_DEPS})
  set_property(GLOBAL APPEND PROPERTY KOLO_BUILT_BACKENDS ${name})
  if(ARG_KNOBS)
    get_filename_component(knobs ${ARG_KNOBS} ABSOLUTE)
    kolo_folder_root(root)
    target_sources(kolo_common PRIVATE ${knobs})
    set_source_files_properties(${knobs} TARGET_DIRECTORY kolo_common
                                PROPERTIES INCLUDE_DIRECTORIES ${root})
    set_property(GLOBAL APPEND PROPERTY KOLO_BACKENDS_WITH_KNOBS ${name})
  endif()
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
  get_property(with_knobs GLOBAL PROPERTY KOLO_BACKENDS_WITH_KNOBS)
  list(SORT with_knobs)
  set(KOLO_BACKEND_KNOBS_DECLARATIONS)
  set(calls)
  foreach(b ${with_knobs})
    string(APPEND KOLO_BACKEND_KNOBS_DECLARATIONS "BackendKnobs backend_knobs_${b}();\n")
    list(APPEND calls "backend_knobs_${b}()")
  endforeach()
  list(JOIN calls ", " KOLO_BACKEND_KNOBS_CALLS)
  configure_file(${PROJECT_SOURCE_DIR}/cmake/build_info.cc.in
                 ${PROJECT_BINARY_DIR}/generated/build_info.cc @ONLY)
  set(KOLO_BUILT_BACKENDS ${backends} PARENT_SCOPE)
endfunction()
