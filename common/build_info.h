// Facts about this build of Kolo, fixed at configure time (CMake writes build_info.cc from
// cmake/build_info.cc.in). Thread-safe: everything here is constant.
#pragma once

#include <span>
#include <string_view>

namespace kolo {

// "0.2.0": the project version of CMakeLists.txt.
std::string_view build_version();

// The names of the backends compiled into this build, e.g. {"mpi", "tcp"}: one per folder of
// backends/ that the build configured (each backend's CMakeLists.txt calls kolo_backend()).
// backends/registry.cc holds the same names with their factories; a unit test checks that the
// two agree. Tools that do not link the backends (kolorun) validate names against this list.
std::span<const std::string_view> built_backends();

// Whether the build has the optional components (cmake/kolo_options.cmake).
bool built_with_mpi();
bool built_with_cuda();
bool built_with_nccl();

}  // namespace kolo
