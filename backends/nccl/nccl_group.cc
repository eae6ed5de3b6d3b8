// NcclBackend's NCCL groups (nccl_backend_impl.h): an operation's group opened by its first
// collective and launched at fence(), a blocking collective's own group, the group ended for an
// abort, and the settling of a non-blocking call.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>
#include <vector>

#include "backends/nccl/nccl_backend_impl.h"
#include "backends/nccl/nccl_kernels.h"
#include "kolo/units.h"

namespace kolo::nccl {

Status NcclBackend::open_group(const std::string& what) {
  if (group_open_) return Status::Ok();
  comm_mu_.lock();
  if (!comm_) {
    comm_mu_.unlock();
    Status failed = pending_.failure();
    return failed.ok() ? Status::Aborted(what + ": the communicator was aborted")
                       : failed.with_context(what);
  }
  const ncclResult_t r = ncclGroupStart();
  if (r != ncclSuccess) {
    comm_mu_.unlock();
    return nccl_status(r, what + ": ncclGroupStart");
  }
  group_open_ = true;
  group_owner_ = std::this_thread::get_id();
  return Status::Ok();
}

ncclResult_t NcclBackend::end_group() {
  // Ended even after a failed call in it, or the communicator stays in the group.
  const ncclResult_t ended = ncclGroupEnd();
  group_open_ = false;
  group_owner_ = std::thread::id();
  comm_mu_.unlock();
  return ended;
}

Status NcclBackend::close_group(const std::string& what) {
  if (!group_open_) return Status::Ok();
  Status st = settle(end_group(), what + ": ncclGroupEnd");
  for (const PostMap& p : post_maps_)  // map() adds none: the group is closed
    if (st.ok()) st = map(p.data, p.data, p.n, p.dtype, p.mul, p.div, p.what);
  post_maps_.clear();  // keeps its capacity for the next operation
  if (st.ok()) st = copy_out(what);
  post_copies_.clear();
  // Stream-ordered after the group's kernels only once it settled; otherwise NCCL may still
  // enqueue kernels that use them, and the destructor frees them after the communicator.
  if (st.ok()) free_retired();
  return st;
}

void NcclBackend::abort_group() {
  if (!group_open_) return;
  // No settle: a group whose peer died may stay InProgress (NCCL waits for the peer to set up
  // its connections) until KOLO_OP_TIMEOUT, and ncclCommAbort is allowed while a non-blocking
  // group is in progress. No post work either: the operation fails, its results are lost.
  (void)end_group();
  post_maps_.clear();
  post_copies_.clear();
}

Status NcclBackend::end_own_group(const Status& calls, const std::string& what) {
  Status ended = close_group(what);
  if (calls.ok()) return ended;
  // The group launched without the refused call: the peers wait for its part.
  fail(calls);
  return calls;
}

Status NcclBackend::settle(ncclResult_t r, const std::string& what) {
  const auto start = Clock::now();
  const auto deadline = start + op_timeout_;
  while (r == ncclInProgress) {
    if (Clock::now() > deadline) {
      Status st = Status::Timeout(what + ": NCCL did not accept the call within " +
                                  format_duration(op_timeout_) + " (KOLO_OP_TIMEOUT)");
      fail(st);
      return st;
    }
    backoff(start);
    r = async_error();
  }
  if (r == ncclSuccess) return Status::Ok();
  // Aborted meanwhile (by the watchdog or the runtime): that reason, not the symptom.
  if (Status failed = pending_.failure(); !failed.ok()) return failed.with_context(what);
  Status st = nccl_status(r, what, last_error());
  // Every error aborts, an invalid argument too: it leaves the communicator usable, but the
  // peers' side of this collective was launched and would wait for this rank until
  // KOLO_OP_TIMEOUT. Aborted, this rank fails at once and the runtime stops, which the peers
  // learn from the control plane.
  fail(st);
  return st;
}

}  // namespace kolo::nccl
