#include "backends/mpi/mpi_backend.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>
#include <string>
#include <vector>

#include "backends/mpi/mpi_runtime.h"
#include "backends/mpi/mpi_types.h"
#include "backends/mpi/mpi_wait.h"
#include "backends/mpi/mpi_world.h"
#include "ops/reduce.h"

namespace kolo {

namespace {

// allreduce and broadcast are element-wise, so a message longer than an int can count is sent
// in pieces; 1 Gi elements keeps each piece far from the limit.
constexpr int64_t kMaxPiece = int64_t{1} << 30;

const char* byte_ptr(const void* p, int64_t offset_elements, size_t element) {
  return static_cast<const char*>(p) + offset_elements * static_cast<int64_t>(element);
}
char* byte_ptr(void* p, int64_t offset_elements, size_t element) {
  return static_cast<char*>(p) + offset_elements * static_cast<int64_t>(element);
}

// What the error names when a collective of `prefix`'s instance times out.
std::string plane_name(const std::string& prefix) {
  auto ends_with = [&](std::string_view tail) {
    return prefix.size() >= tail.size() &&
           prefix.compare(prefix.size() - tail.size(), tail.size(), tail) == 0;
  };
  if (ends_with("/ctrl")) return "the control plane (negotiation, '" + prefix + "')";
  if (ends_with("/data")) return "the data plane ('" + prefix + "')";
  return "'" + prefix + "'";
}

class MpiBackend final : public Backend {
 public:
  MpiBackend(MPI_Comm comm, int rank, int size, const BackendContext& context)
      : comm_(comm),
        rank_(rank),
        size_(size),
        op_timeout_(context.op_timeout),
        timeout_knob_(context.op_timeout_knob),
        plane_(plane_name(context.store_prefix)) {}
  ~MpiBackend() override {
    // MPI_Finalize may have run already (atexit, or the application): freeing then is illegal.
    if (!mpi_finalized()) MPI_Comm_free(&comm_);
  }

  std::string_view name() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

 protected:
  Status do_allreduce(const void* input, void* output, int64_t count, DataType dtype,
                      const Reduction& reduction) override {
    if (count == 0) return Status::Ok();
    KOLO_ASSIGN_OR_RETURN(MPI_Datatype type, mpi_datatype(dtype));
    KOLO_ASSIGN_OR_RETURN(MPI_Op op, mpi_op(dtype, reduction.op));
    const size_t element = dtype_size(dtype);
    // The prescale needs a scaled copy of the input, and output is the natural place for it:
    // then the reduction runs in place and needs no scratch memory.
    bool in_place = input == output;
    if (reduction.prescale != 1.0) {
      ops::scale_copy(dtype, output, input, count, reduction.prescale);
      in_place = true;
    }
    for (int64_t offset = 0; offset < count; offset += kMaxPiece) {
      const int n = static_cast<int>(std::min(kMaxPiece, count - offset));
      const void* send = in_place ? MPI_IN_PLACE : byte_ptr(input, offset, element);
      MPI_Request request = MPI_REQUEST_NULL;
      const int started =
          MPI_Iallreduce(send, byte_ptr(output, offset, element), n, type, op, comm_, &request);
      KOLO_RETURN_IF_ERROR(complete(started, request, "allreduce", "MPI_Iallreduce", n, dtype));
    }
    ops::finish_reduction(dtype, reduction, output, count, size_);
    return Status::Ok();
  }

  Status do_allgather(const void* input, void* output, DataType dtype,
                      const std::vector<int64_t>& counts) override {
    KOLO_RETURN_IF_ERROR(to_int_layout("allgather", "counts", counts, counts_, displs_));
    KOLO_ASSIGN_OR_RETURN(MPI_Datatype type, mpi_datatype(dtype));
    // The contract lets input alias this rank's slot of output; MPI forbids aliasing, but
    // MPI_IN_PLACE means exactly that layout.
    const void* send =
        input == byte_ptr(output, displs_[rank_], dtype_size(dtype)) ? MPI_IN_PLACE : input;
    const int64_t total = total_of(counts_, displs_);
    MPI_Request request = MPI_REQUEST_NULL;
    const int started = MPI_Iallgatherv(send, counts_[rank_], type, output, counts_.data(),
                                        displs_.data(), type, comm_, &request);
    return complete(started, request, "allgather", "MPI_Iallgatherv", total, dtype);
  }

  Status do_broadcast(void* data, int64_t count, DataType dtype, int root) override {
    KOLO_ASSIGN_OR_RETURN(MPI_Datatype type, mpi_datatype(dtype));
    const size_t element = dtype_size(dtype);
    for (int64_t offset = 0; offset < count; offset += kMaxPiece) {
      const int n = static_cast<int>(std::min(kMaxPiece, count - offset));
      MPI_Request request = MPI_REQUEST_NULL;
      const int started =
          MPI_Ibcast(byte_ptr(data, offset, element), n, type, root, comm_, &request);
      KOLO_RETURN_IF_ERROR(complete(started, request, "broadcast", "MPI_Ibcast", n, dtype));
    }
    return Status::Ok();
  }

  Status do_alltoall(const void* input, void* output, DataType dtype,
                     const std::vector<int64_t>& send_counts,
                     const std::vector<int64_t>& recv_counts) override {
    KOLO_RETURN_IF_ERROR(to_int_layout("alltoall", "send_counts", send_counts, counts_, displs_));
    KOLO_RETURN_IF_ERROR(
        to_int_layout("alltoall", "recv_counts", recv_counts, recv_counts_, recv_displs_));
    KOLO_ASSIGN_OR_RETURN(MPI_Datatype type, mpi_datatype(dtype));
    const int64_t most = std::max(total_of(counts_, displs_), total_of(recv_counts_, recv_displs_));
    MPI_Request request = MPI_REQUEST_NULL;
    const int started =
        MPI_Ialltoallv(input, counts_.data(), displs_.data(), type, output, recv_counts_.data(),
                       recv_displs_.data(), type, comm_, &request);
    return complete(started, request, "alltoall", "MPI_Ialltoallv", most, dtype);
  }

  Status do_reducescatter(const void* input, void* output, DataType dtype,
                          const Reduction& reduction, const std::vector<int64_t>& counts) override {
    KOLO_RETURN_IF_ERROR(to_int_layout("reducescatter", "counts", counts, counts_, displs_));
    KOLO_ASSIGN_OR_RETURN(MPI_Datatype type, mpi_datatype(dtype));
    KOLO_ASSIGN_OR_RETURN(MPI_Op op, mpi_op(dtype, reduction.op));
    const int64_t total = total_of(counts_, displs_);
    const void* send = input;
    if (reduction.prescale != 1.0) {
      // Unlike allreduce the output is too small to hold the scaled input: use scratch, which
      // is kept so that steady state allocates nothing.
      scratch_.resize(std::max(scratch_.size(), static_cast<size_t>(total) * dtype_size(dtype)));
      ops::scale_copy(dtype, scratch_.data(), input, total, reduction.prescale);
      send = scratch_.data();
    } else if (input == output && total > 0) {
      // In-place MPI_Reduce_scatter reads the input from recvbuf and leaves this rank's block
      // at its start: exactly the aliasing the caller asked for.
      send = MPI_IN_PLACE;
    }
    MPI_Request request = MPI_REQUEST_NULL;
    const int started =
        MPI_Ireduce_scatter(send, output, counts_.data(), type, op, comm_, &request);
    KOLO_RETURN_IF_ERROR(
        complete(started, request, "reducescatter", "MPI_Ireduce_scatter", total, dtype));
    ops::finish_reduction(dtype, reduction, output, counts[rank_], size_);
    return Status::Ok();
  }

  Status do_barrier() override {
    MPI_Request request = MPI_REQUEST_NULL;
    const int started = MPI_Ibarrier(comm_, &request);
    return complete(started, request, "barrier", "MPI_Ibarrier", /*count=*/-1, DataType::kUInt8);
  }

 private:
  // Waits for `request`, which `call` started with return code `started`; `count` elements of
  // dtype are the most this rank sends or receives (-1: no data, a barrier). Returns once it
  // completed, or with MPI's error. A request still in flight after op_timeout_ ends the job
  // (abort_job, mpi_wait.h, says why): this never returns while MPI may use the buffers.
  Status complete(int started, MPI_Request& request, const char* op, const char* call,
                  int64_t count, DataType dtype) {
    // The context is built on failure only: this is every collective's hot path.
    auto what = [&] { return std::string("mpi ") + op + " (" + call + ")"; };
    if (started != MPI_SUCCESS) return mpi_status(started, what());
    const int64_t bytes = std::max<int64_t>(count, 0) * static_cast<int64_t>(dtype_size(dtype));
    Status st = wait_request(request, bytes, op_timeout_);
    if (st.ok()) return st;
    if (st.code() != StatusCode::kTimeout) return st.with_context(what());
    const std::string data =
        count < 0 ? "" : " of " + std::to_string(count) + " x " + std::string(dtype_name(dtype));
    abort_job("mpi " + std::string(op) + data + " (" + call + ") on " + plane_ + ", rank " +
              std::to_string(rank_) + " of " + std::to_string(size_) + ": " + st.message() + " (" +
              timeout_knob_ +
              "): a rank of the communicator is frozen (stopped, or stuck outside Kolo) or the "
              "ranks' operations do not match. MPI cannot cancel the operation and may still "
              "write this rank's buffers, so rank " +
              std::to_string(rank_) + " ends the job with MPI_Abort (exit code " +
              std::to_string(kTimeoutExitCode) + ")");
  }

  // The number of elements a layout of to_int_layout spans.
  static int64_t total_of(const std::vector<int>& counts, const std::vector<int>& displs) {
    return counts.empty() ? 0 : static_cast<int64_t>(displs.back()) + counts.back();
  }

  // Converts per-rank element counts to MPI's int counts and displacements, refusing what an
  // int cannot hold (MPI 3.1 has no large-count collectives).
  static Status to_int_layout(const char* op, const char* arg, const std::vector<int64_t>& in,
                              std::vector<int>& counts, std::vector<int>& displs) {
    counts.resize(in.size());
    displs.resize(in.size());
    int64_t offset = 0;
    for (size_t i = 0; i < in.size(); ++i) {
      if (in[i] > INT_MAX || offset > INT_MAX)
        return Status::InvalidArgument(std::string("mpi ") + op + ": " + arg + "[" +
                                       std::to_string(i) + "] = " + std::to_string(in[i]) +
                                       " at element offset " + std::to_string(offset) +
                                       " exceeds MPI's int limit of " + std::to_string(INT_MAX) +
                                       " elements; split the tensor or use another backend");
      counts[i] = static_cast<int>(in[i]);
      displs[i] = static_cast<int>(offset);
      offset += in[i];
    }
    if (offset > INT_MAX)
      return Status::InvalidArgument(
          std::string("mpi ") + op + ": " + arg + " sum to " + std::to_string(offset) +
          " elements, more than MPI's int "
          "limit of " +
          std::to_string(INT_MAX) + "; split the tensor or use another backend");
    return Status::Ok();
  }

  MPI_Comm comm_;
  const int rank_;
  const int size_;
  const std::chrono::nanoseconds op_timeout_;
  const std::string timeout_knob_;  // the knob that set op_timeout_, for the error
  const std::string plane_;         // which instance this is, for the error
  // Scratch reused across calls (one thread at a time, per the Backend contract).
  std::vector<int> counts_, displs_, recv_counts_, recv_displs_;
  std::vector<char> scratch_;
};

}  // namespace

Result<std::unique_ptr<Backend>> make_mpi_backend(const BackendContext& context) {
  KOLO_RETURN_IF_ERROR(ensure_mpi());
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (rank != context.rank || size != context.size)
    return Status::PreconditionFailed(
        "mpi backend: the job says this is rank " + std::to_string(context.rank) + " of " +
        std::to_string(context.size) + " but MPI_COMM_WORLD says rank " + std::to_string(rank) +
        " of " + std::to_string(size) +
        "; the mpi backend needs the job to be launched by mpirun (use the tcp backend under "
        "kolorun)");
  MPI_Comm comm = MPI_COMM_NULL;
  KOLO_RETURN_IF_ERROR(mpi_status(MPI_Comm_dup(MPI_COMM_WORLD, &comm), "mpi: MPI_Comm_dup"));
  // Errors come back as codes that we turn into Status, instead of aborting the process.
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  return std::unique_ptr<Backend>(new MpiBackend(comm, rank, size, context));
}

Result<std::unique_ptr<Backend>> make_mpi_subgroup_backend(const BackendContext& context,
                                                           const std::vector<int>& world_ranks) {
  KOLO_RETURN_IF_ERROR(ensure_mpi());
  MPI_Group world_group = MPI_GROUP_NULL, group = MPI_GROUP_NULL;
  KOLO_RETURN_IF_ERROR(
      mpi_status(MPI_Comm_group(MPI_COMM_WORLD, &world_group), "mpi: MPI_Comm_group"));
  int rc =
      MPI_Group_incl(world_group, static_cast<int>(world_ranks.size()), world_ranks.data(), &group);
  MPI_Group_free(&world_group);
  KOLO_RETURN_IF_ERROR(mpi_status(rc, "mpi: MPI_Group_incl"));
  // Collective over the group's members only, so other ranks need not take part.
  MPI_Comm comm = MPI_COMM_NULL;
  rc = MPI_Comm_create_group(MPI_COMM_WORLD, group, context.group_tag, &comm);
  MPI_Group_free(&group);
  KOLO_RETURN_IF_ERROR(mpi_status(rc, "mpi: MPI_Comm_create_group"));
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  if (rank != context.rank || size != context.size) {
    MPI_Comm_free(&comm);
    return Status::Internal("mpi: the sub-group's communicator has rank " + std::to_string(rank) +
                            " of " + std::to_string(size) + ", expected rank " +
                            std::to_string(context.rank) + " of " + std::to_string(context.size));
  }
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  return std::unique_ptr<Backend>(new MpiBackend(comm, rank, size, context));
}

BackendEntry backend_entry_mpi() {
  BackendEntry entry;
  entry.name = "mpi";
  entry.factory = &make_mpi_backend;
  entry.subgroup = &make_mpi_subgroup_backend;
  entry.devices = {DeviceKind::kCpu};
  entry.fixed_world = true;  // MPI_COMM_WORLD: see BackendEntry::fixed_world
  // MPI_Allreduce's algorithm (and so its summation order) varies with the message size and
  // the library's tuning: KOLO_DETERMINISTIC=1 is refused at init (docs/determinism.md).
  entry.rank_order = false;
  // Under mpirun the job is MPI's: its ranks, and MPI's own collectives by default.
  entry.launcher = {"mpirun", &launched_by_mpirun, &world_from_mpi, /*default_backend=*/true};
  return entry;
}

}  // namespace kolo
