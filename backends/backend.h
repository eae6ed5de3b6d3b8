// Backend: one transport's implementation of the collectives. The coordinator talks only to
// this interface. Each backend lives in its own folder and has one line in backends/registry.cc
// (see registry.h), which is all it takes to make it selectable.
//
// Contract for every collective:
// - All ranks of the backend's group call it in the same order with consistent arguments.
// - Arguments are validated first (see validate_* below): an invalid one returns
//   InvalidArgument naming the argument, the expected and the actual value, and nothing is sent.
// - Buffers are on a device the backend supports (supports()), borrowed for the call only. The
//   executor passes tensors on such a device as they are and stages the others through host
//   memory where it can (coordinator/executor.h).
// - Blocking: returns when this rank's part is done. Errors: transport failures return IoError
//   or PeerFailure naming the peer; an op the backend lacks returns Unsupported with the
//   message "backend <name> does not support <op>".
// - Thread-safety: one thread at a time (the coordinator's background thread).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kolo/status.h"
#include "kolo/types.h"

namespace kolo {

struct AllreduceOptions {
  ReduceOp op = ReduceOp::kSum;
  double prescale = 1.0;   // applied to each rank's input before the reduction
  double postscale = 1.0;  // applied to the result after (and after the 1/size of kAverage)
};

struct AllgatherOptions {
  // Elements contributed by each rank (size() entries). Output holds sum(counts) elements.
  std::vector<int64_t> counts;
};

struct BroadcastOptions {
  int root = 0;
};

struct AlltoallOptions {
  std::vector<int64_t> send_counts;  // elements sent to each rank, taken in order from input
  std::vector<int64_t> recv_counts;  // elements received from each rank, stored in order
};

struct ReducescatterOptions {
  ReduceOp op = ReduceOp::kSum;
  double prescale = 1.0;
  double postscale = 1.0;
  // Elements of the result each rank receives. Input holds sum(counts) elements on every rank.
  std::vector<int64_t> counts;
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

  // input == output is in-place. count elements of dtype.
  virtual Status allreduce(const void* input, void* output, int64_t count, DataType dtype,
                           const AllreduceOptions& options);
  // input holds options.counts[rank()] elements.
  virtual Status allgather(const void* input, void* output, DataType dtype,
                           const AllgatherOptions& options);
  virtual Status broadcast(void* data, int64_t count, DataType dtype,
                           const BroadcastOptions& options);
  virtual Status alltoall(const void* input, void* output, DataType dtype,
                          const AlltoallOptions& options);
  virtual Status reducescatter(const void* input, void* output, DataType dtype,
                               const ReducescatterOptions& options);
  virtual Status barrier();

 protected:
  // The uniform "backend <name> does not support <op>" error.
  Status unsupported(std::string_view op) const;
};

// Argument checks shared by every backend. Each returns OK or InvalidArgument naming the
// argument, what was expected and what was given, e.g.
// "allreduce: count must be >= 0, got -3".
Status validate_dtype(std::string_view op, DataType dtype);
Status validate_reduce_op(std::string_view op, ReduceOp reduce);
Status validate_buffer(std::string_view op, std::string_view arg, const void* data,
                       int64_t count);
Status validate_counts(std::string_view op, std::string_view arg,
                       const std::vector<int64_t>& counts, int size);
Status validate_allreduce(int size, const void* input, const void* output, int64_t count,
                          DataType dtype, const AllreduceOptions& options);
Status validate_allgather(int rank, int size, const void* input, const void* output,
                          DataType dtype, const AllgatherOptions& options);
Status validate_broadcast(int size, const void* data, int64_t count, DataType dtype,
                          const BroadcastOptions& options);
Status validate_alltoall(int size, const void* input, const void* output, DataType dtype,
                         const AlltoallOptions& options);
Status validate_reducescatter(int rank, int size, const void* input, const void* output,
                              DataType dtype, const ReducescatterOptions& options);

}  // namespace kolo
