// Backend: one transport's implementation of the collectives. The coordinator talks only to
// this interface. Each backend lives in its own folder and has one line in backends/registry.cc
// (see registry.h), which is all it takes to make it selectable.
//
// Contract for every collective:
// - All ranks of the backend's group call it in the same order with consistent arguments.
// - Arguments are validated here, once, for every backend and every caller: the public
//   methods are non-virtual, check their arguments with the validate_* functions below and
//   only then call the protected virtual do_* implementation. An invalid argument returns
//   InvalidArgument naming the argument, the expected and the actual value, and nothing is
//   sent. The do_* methods may rely on valid arguments and never check them again.
// - Buffers are on a device the backend supports (supports()), borrowed for the call only. The
//   executor passes tensors on such a device as they are and stages the others through host
//   memory where it can (coordinator/executor.h).
// - Blocking: returns when this rank's part is done. Errors: transport failures return IoError
//   or PeerFailure naming the peer; an op the backend lacks returns Unsupported with the
//   message "backend <name> does not support <op>".
// - Thread-safety: one thread at a time (the coordinator's background thread).
//
// Counts are in elements of dtype. Per-rank counts are vectors of size() element counts: a
// backend moves flat buffers, so it takes elements per rank, where the public API (kolo.h)
// speaks of a tensor's rows and derives these counts from its shape; the reduction is the one
// public kolo::Reduction.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kolo/status.h"
#include "kolo/types.h"

namespace kolo {

// One tensor of a fused allreduce (Backend::allreduce_pieces): count elements read from input,
// its part of the result written to output. input == output is in-place; otherwise no piece's
// buffers overlap another's.
struct AllreducePiece {
  const void* input = nullptr;
  void* output = nullptr;
  int64_t count = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // "tcp", "mpi", ...
  virtual std::string_view name() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Whether buffers on this device can be passed directly. Depends on device.kind only (every
  // rank must answer alike for its own ordinal) and equals the kinds of the backend's registry
  // entry (create_backend checks). CPU backends: cpu only.
  virtual bool supports(Device device) const { return device.is_cpu(); }

  // input == output is in-place.
  Status allreduce(const void* input, void* output, int64_t count, DataType dtype,
                   const Reduction& reduction);
  // input holds counts[rank()] elements (it may be this rank's slot of output); output holds
  // sum(counts), every rank's input in rank order.
  Status allgather(const void* input, void* output, DataType dtype,
                   const std::vector<int64_t>& counts);
  Status broadcast(void* data, int64_t count, DataType dtype, int root);
  // Sends send_counts[j] elements (taken in order from input) to rank j and receives
  // recv_counts[j] from rank j (stored in order in output). send_counts[rank()] must equal
  // recv_counts[rank()]; what peers send is checked against recv_counts by the transfer.
  Status alltoall(const void* input, void* output, DataType dtype,
                  const std::vector<int64_t>& send_counts, const std::vector<int64_t>& recv_counts);
  // input holds sum(counts) elements on every rank; output receives the reduced block of
  // counts[rank()] elements that starts at sum(counts[0..rank())).
  Status reducescatter(const void* input, void* output, DataType dtype, const Reduction& reduction,
                       const std::vector<int64_t>& counts);
  Status barrier() { return do_barrier(); }

  // Optional: whether allreduce_pieces is implemented. The same answer on every rank (it
  // depends on the backend, and nccl agrees on it at connect).
  virtual bool has_allreduce_pieces() const { return false; }
  // Note [Allreduce pieces]. The allreduce of the pieces' inputs concatenated in order, each
  // piece's part of the result written to its output: the same values, bit for bit, as
  // copying the inputs into one buffer, allreduce() of it, and copying the parts out. It lets
  // the executor fuse a batch without its fusion buffer: a backend that moves data through
  // staging of its own (shm) reads and writes the tensors where they are, which saves a copy
  // in and a copy out of every byte; one with a fusion buffer of its own (nccl, on the device)
  // fills it with its own kernels. Every rank passes the same cut: the same number of pieces
  // with the same counts, in order (the executor cuts every rank's batch alike, from the one
  // response), because a backend may lay the pieces out by their counts (nccl pads each one to
  // 16 bytes in its buffer, so its total depends on the cut). A backend may check only the
  // total. shm accepts more: any cut of the same total, and an allreduce() of that total on
  // another rank (backends/shm/shm_backend.h). Backends without it (has_allreduce_pieces()
  // false) return unsupported("allreduce_pieces"); callers then use a buffer of their own and
  // allreduce().
  Status allreduce_pieces(const std::vector<AllreducePiece>& pieces, DataType dtype,
                          const Reduction& reduction);

 protected:
  // The implementations, called with validated arguments only. The defaults return
  // unsupported(<op>).
  virtual Status do_allreduce(const void* input, void* output, int64_t count, DataType dtype,
                              const Reduction& reduction);
  virtual Status do_allreduce_pieces(const std::vector<AllreducePiece>& pieces, DataType dtype,
                                     const Reduction& reduction);
  virtual Status do_allgather(const void* input, void* output, DataType dtype,
                              const std::vector<int64_t>& counts);
  virtual Status do_broadcast(void* data, int64_t count, DataType dtype, int root);
  virtual Status do_alltoall(const void* input, void* output, DataType dtype,
                             const std::vector<int64_t>& send_counts,
                             const std::vector<int64_t>& recv_counts);
  virtual Status do_reducescatter(const void* input, void* output, DataType dtype,
                                  const Reduction& reduction, const std::vector<int64_t>& counts);
  virtual Status do_barrier();

  // The uniform "backend <name> does not support <op>" error.
  Status unsupported(std::string_view op) const;
};

// The argument checks, each implemented once. Backend's methods run them; the coordinator
// runs the same functions on what a caller submits (with the tensor's name as context), so a
// bad reduce op reads alike wherever it is caught. Each returns OK or InvalidArgument
// "<context>: <what> must be <expected>, got <actual>", e.g.
// "allreduce: count of input must be >= 0, got -3".
Status validate_dtype(std::string_view context, DataType dtype);
// op is a ReduceOp enumerator; prescale and postscale are finite.
Status validate_reduction(std::string_view context, const Reduction& reduction);
// Whether validate_reduction() passes, without building its message (for hot paths).
bool is_valid_reduction(const Reduction& reduction);
// count >= 0, and data non-null when count > 0.
Status validate_buffer(std::string_view context, std::string_view arg, const void* data,
                       int64_t count);
// One non-negative entry per rank.
Status validate_counts(std::string_view context, std::string_view arg,
                       const std::vector<int64_t>& counts, int size);
// 0 <= root < size.
Status validate_root(std::string_view context, int root, int size);

}  // namespace kolo
