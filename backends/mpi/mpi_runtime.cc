#include "backends/mpi/mpi_runtime.h"

#include <cstdlib>
#include <string>

#include "common/thread_annotations.h"

namespace kolo {

namespace {

std::string_view thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE:
      return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED:
      return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED:
      return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE:
      return "MPI_THREAD_MULTIPLE";
  }
  return "unknown";
}

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

}  // namespace

Status ensure_mpi() {
  // Serialise the check-then-init so two threads creating backends at once do not both init.
  // What it guards is MPI's own state, which no annotation can name.
  static Mutex mu;
  MutexLock lock(mu);
  if (mpi_finalized())
    return Status::PreconditionFailed(
        "mpi: MPI_Finalize was already called in this process; MPI cannot be used again");
  int initialized = 0;
  MPI_Initialized(&initialized);
  int provided = MPI_THREAD_SINGLE;
  if (!initialized) {
    int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
    if (rc != MPI_SUCCESS) return mpi_status(rc, "mpi: MPI_Init_thread");
    std::atexit(&finalize_at_exit);
  } else {
    MPI_Query_thread(&provided);
  }
  if (provided < MPI_THREAD_MULTIPLE)
    return Status::PreconditionFailed(
        "mpi: Kolo needs MPI_THREAD_MULTIPLE but MPI provides " +
        std::string(thread_level_name(provided)) +
        (initialized ? "; initialise MPI with MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...)"
                     : "; use an MPI library built with thread support"));
  return Status::Ok();
}

bool mpi_finalized() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

Status mpi_status(int error, std::string_view what) {
  if (error == MPI_SUCCESS) return Status::Ok();
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(error, text, &length) != MPI_SUCCESS) length = 0;
  std::string message = std::string(what) + ": ";
  message += length > 0 ? std::string(text, static_cast<size_t>(length))
                        : "MPI error code " + std::to_string(error);
  return Status::IoError(std::move(message));
}

}  // namespace kolo
