// kolo::built() and kolo::mpi_threads_supported(): what this build has, from the registry.
#include <algorithm>

#include "backends/registry.h"
#include "kolo/kolo.h"

namespace kolo {

bool built(std::string_view backend) {
  const auto& entries = registered_backends();
  return std::any_of(entries.begin(), entries.end(),
                     [&](const BackendEntry& e) { return e.name == backend; });
}

std::vector<std::string> built_backend_names() {
  std::vector<std::string> names;
  for (const BackendEntry& e : registered_backends()) names.emplace_back(e.name);
  return names;
}

// ensure_mpi() (backends/mpi/mpi_runtime.h) asks for MPI_THREAD_MULTIPLE and refuses less.
bool mpi_threads_supported() { return built("mpi"); }

// The deprecated enum spelling (kolo.h): definitions only, so their own uses of BackendKind are
// not the callers the warning is for.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

std::string_view backend_kind_name(BackendKind kind) {
  switch (kind) {
    case BackendKind::kTcp:
      return "tcp";
    case BackendKind::kShm:
      return "shm";
    case BackendKind::kMpi:
      return "mpi";
    case BackendKind::kNccl:
      return "nccl";
  }
  return "unknown";
}

bool built(BackendKind kind) { return built(backend_kind_name(kind)); }

#pragma GCC diagnostic pop

}  // namespace kolo
