#include "backends/nccl/pending_ops.h"

#include <algorithm>
#include <utility>

#include "kolo/units.h"

namespace kolo::nccl {

Status op_failure(const std::string& what, const Status& why) {
  return Status(why.code(), what + ": " + why.message());
}

void PendingOps::add(std::string what, Query query, Done done, Clock::time_point now) {
  Status failed;
  {
    MutexLock lock(mu_);
    if (!failed_all_) {
      // Closed but not failed yet: an abort is inside ncclCommAbort on another thread, and
      // this op's buffers are only safe to report once it returned: fail_all() fails it.
      ops_.push_back({std::move(what), std::move(query), std::move(done), now});
      cv_.notify_all();
      return;
    }
    failed = failure_;
  }
  done(op_failure(what, failed));
}

Status PendingOps::poll(std::chrono::nanoseconds timeout, Clock::time_point now) {
  for (;;) {
    Query query;
    std::string what;
    Clock::time_point started;
    {
      MutexLock lock(mu_);
      if (!failure_.ok()) return failure_;
      if (ops_.empty()) return Status::Ok();
      query = ops_.front().query;
      what = ops_.front().what;
      started = ops_.front().started;
    }
    Result<bool> finished = query();  // outside the lock: it may be slow (a driver call)
    if (!finished.ok()) return op_failure(what, finished.status());
    if (!*finished) {
      if (now - started <= timeout) return Status::Ok();
      return Status::Timeout(what + ": did not complete on the GPU within " +
                             format_duration(timeout) +
                             " (KOLO_OP_TIMEOUT): a peer is dead or stuck, or the ranks' "
                             "operations do not match");
    }
    Done done;
    {
      MutexLock lock(mu_);
      // Closed meanwhile: the event may have fired because the abort ended the kernel.
      if (!failure_.ok()) return failure_;
      if (ops_.empty()) return Status::Ok();
      done = std::move(ops_.front().done);
      ops_.pop_front();
      // The next op runs after this one on the stream: its time starts now at the earliest,
      // so a long queue is not mistaken for a stuck peer.
      if (!ops_.empty()) ops_.front().started = std::max(ops_.front().started, now);
    }
    done(Status::Ok());
  }
}

void PendingOps::close_locked(const Status& why) {
  if (failure_.ok()) failure_ = why.ok() ? Status::Aborted("communicator closed") : why;
}

void PendingOps::close(const Status& why) {
  MutexLock lock(mu_);
  close_locked(why);
}

size_t PendingOps::fail_all(const Status& why) {
  std::deque<Op> failed;
  Status reason;
  {
    MutexLock lock(mu_);
    close_locked(why);
    failed_all_ = true;
    reason = failure_;
    failed.swap(ops_);
  }
  for (Op& op : failed) op.done(op_failure(op.what, reason));
  return failed.size();
}

bool PendingOps::wait(std::chrono::nanoseconds interval) {
  MutexLock lock(mu_);
  if (ops_.empty())
    cv_.wait(lock.native(), [&]() KOLO_REQUIRES(mu_) { return shut_down_ || !ops_.empty(); });
  else if (!shut_down_)
    cv_.wait_for(lock.native(), interval, [&]() KOLO_REQUIRES(mu_) { return shut_down_; });
  return !shut_down_;
}

void PendingOps::shutdown() {
  {
    MutexLock lock(mu_);
    shut_down_ = true;
  }
  cv_.notify_all();
}

size_t PendingOps::size() const {
  MutexLock lock(mu_);
  return ops_.size();
}

Status PendingOps::failure() const {
  MutexLock lock(mu_);
  return failure_;
}

}  // namespace kolo::nccl
