// Facts about this build of Kolo, fixed at configure time (CMake writes build_info.cc from
// cmake/build_info.cc.in). Thread-safe: everything here is constant.
#pragma once

#include <span>
#include <string_view>

#include "common/knobs.h"

namespace kolo {

// "0.2.0": the project version of CMakeLists.txt.
std::string_view build_version();

// The names of the backends compiled into this build, e.g. {"mpi", "tcp"}: one per folder of
// backends/ that the build configured (each backend's CMakeLists.txt calls kolo_backend()).
// backends/registry.cc holds the same names with their factories; a unit test checks that the
// two agree. Tools that do not link the backends (kolorun) validate names against this list.
std::span<const std::string_view> built_backends();

// The knob rows and retired names of each backend of this build that declares any
// (kolo_backend(<name> ... KNOBS <name>_knobs.cc)), in the order of built_backends(). The
// registry (all_knobs(), retired_knobs()) appends them to the core's; ask it, not this.
std::span<const BackendKnobs> built_backend_knobs();

}  // namespace kolo
