// kolo::built() and kolo::mpi_threads_supported(): what this build has, from the registry.
#include <algorithm>

#include "backends/registry.h"
#include "kolo/kolo.h"

namespace kolo {

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

bool built(BackendKind kind) {
  const auto& entries = registered_backends();
  return std::any_of(entries.begin(), entries.end(),
                     [&](const BackendEntry& e) { return e.name == backend_kind_name(kind); });
}

// ensure_mpi() (backends/mpi/mpi_runtime.h) asks for MPI_THREAD_MULTIPLE and refuses less.
bool mpi_threads_supported() { return built(BackendKind::kMpi); }

}  // namespace kolo
