# The checking builds (README "Checks"): sanitizers, libFuzzer targets and Clang's thread-safety
# analysis. Each is a separate build tree made by scripts/run-checks.sh; the default build has
# none of them.
#
# KOLO_SANITIZE: a -fsanitize= list, e.g. "address,undefined" or "thread", applied to every C and
#   C++ object and link. Any error aborts the process (-fno-sanitize-recover), so a test that
#   trips one fails. CUDA code is left out of these builds: its runtime is not built for them.
# KOLO_FUZZ: builds the libFuzzer targets of tests/fuzz (Clang only). Every object gets the
#   coverage instrumentation libFuzzer steers by.
# KOLO_THREAD_SAFETY: Clang's -Wthread-safety over the GUARDED_BY/REQUIRES annotations
#   (common/thread_annotations.h), as errors.
set(KOLO_SANITIZE "" CACHE STRING "Sanitizers for a checking build: address,undefined or thread")
option(KOLO_FUZZ "Build the libFuzzer targets (tests/fuzz; needs Clang)" OFF)
option(KOLO_THREAD_SAFETY "Clang's thread-safety analysis, as errors" OFF)

set(kolo_c_cxx $<COMPILE_LANGUAGE:C,CXX>)
# A checking build wants line numbers in its reports and a short build, not peak speed:
# -O1 with line tables compiles about twice as fast as -O3 -g and still finds what -O3 would.
if(KOLO_SANITIZE OR KOLO_FUZZ)
  set(CMAKE_C_FLAGS_RELEASE "-O1 -gline-tables-only -DNDEBUG")
  set(CMAKE_CXX_FLAGS_RELEASE "-O1 -gline-tables-only -DNDEBUG")
endif()
if(KOLO_SANITIZE)
  if(KOLO_HAVE_CUDA)
    message(FATAL_ERROR "KOLO_SANITIZE=${KOLO_SANITIZE} needs -DKOLO_WITH_CUDA=OFF: the CUDA "
                        "runtime is not built for sanitizers")
  endif()
  add_compile_options($<${kolo_c_cxx}:-fsanitize=${KOLO_SANITIZE}>
                      $<${kolo_c_cxx}:-fno-sanitize-recover=all>
                      $<${kolo_c_cxx}:-fno-omit-frame-pointer>)
  add_link_options(-fsanitize=${KOLO_SANITIZE})
endif()
if(KOLO_FUZZ OR KOLO_THREAD_SAFETY)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "KOLO_FUZZ and KOLO_THREAD_SAFETY need Clang "
                        "(-DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++)")
  endif()
endif()
if(KOLO_FUZZ)
  add_compile_options($<${kolo_c_cxx}:-fsanitize=fuzzer-no-link>)
  add_link_options(-fsanitize=fuzzer-no-link)
endif()
if(KOLO_THREAD_SAFETY)
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-Wthread-safety>
                      $<$<COMPILE_LANGUAGE:CXX>:-Werror=thread-safety>)
endif()
