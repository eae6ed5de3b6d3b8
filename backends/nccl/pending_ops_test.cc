// PendingOps: completion in order, the op timeout, and the abort path's bookkeeping. The ops'
// "device" is a flag per op, so every path runs without a GPU.
#include "backends/nccl/pending_ops.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

namespace kolo::nccl {
namespace {

using std::chrono::seconds;
using Clock = PendingOps::Clock;

struct FakeOp {
  bool finished = false;
  Status device_error;          // what the "event query" reports when not OK
  std::vector<Status> results;  // every call of done
};

void add(PendingOps& ops, const std::string& what, const std::shared_ptr<FakeOp>& op,
         Clock::time_point now) {
  ops.add(
      what,
      [op]() -> Result<bool> {
        if (!op->device_error.ok()) return op->device_error;
        return op->finished;
      },
      [op](const Status& st) { op->results.push_back(st); }, now);
}

TEST(PendingOpsTest, CompletesInOrderAndOnlyFinishedOps) {
  PendingOps ops;
  const auto t0 = Clock::now();
  auto a = std::make_shared<FakeOp>(), b = std::make_shared<FakeOp>();
  add(ops, "allreduce 'a'", a, t0);
  add(ops, "allreduce 'b'", b, t0);
  EXPECT_TRUE(ops.poll(seconds(60), t0).ok());
  EXPECT_EQ(ops.size(), 2u);
  b->finished = true;  // b cannot complete before a: they share a stream
  EXPECT_TRUE(ops.poll(seconds(60), t0).ok());
  EXPECT_TRUE(a->results.empty());
  EXPECT_TRUE(b->results.empty());
  a->finished = true;
  EXPECT_TRUE(ops.poll(seconds(60), t0).ok());
  ASSERT_EQ(a->results.size(), 1u);
  ASSERT_EQ(b->results.size(), 1u);
  EXPECT_TRUE(a->results[0].ok());
  EXPECT_TRUE(b->results[0].ok());
  EXPECT_EQ(ops.size(), 0u);
  EXPECT_TRUE(ops.failure().ok());
}

TEST(PendingOpsTest, TheOldestOpPastTheTimeoutIsReportedNotFailed) {
  PendingOps ops;
  const auto t0 = Clock::now();
  auto a = std::make_shared<FakeOp>();
  add(ops, "allgather 'x'", a, t0);
  EXPECT_TRUE(ops.poll(seconds(60), t0 + seconds(60)).ok());  // exactly the timeout: still OK
  Status st = ops.poll(seconds(60), t0 + seconds(61));
  EXPECT_EQ(st.code(), StatusCode::kTimeout);
  EXPECT_EQ(st.message(),
            "allgather 'x': did not complete on the GPU within 60.0 s (KOLO_OP_TIMEOUT): a peer is "
            "dead or stuck, or the ranks' operations do not match");
  // The caller aborts the communicator before the ops are failed.
  EXPECT_TRUE(a->results.empty());
  EXPECT_EQ(ops.size(), 1u);
}

TEST(PendingOpsTest, AQueuedOpsTimeStartsWhenTheOneBeforeItCompletes) {
  PendingOps ops;
  const auto t0 = Clock::now();
  auto a = std::make_shared<FakeOp>(), b = std::make_shared<FakeOp>();
  add(ops, "a", a, t0);
  add(ops, "b", b, t0);
  a->finished = true;
  EXPECT_TRUE(ops.poll(seconds(60), t0 + seconds(50)).ok());  // a done; b's clock starts at 50s
  EXPECT_TRUE(ops.poll(seconds(60), t0 + seconds(100)).ok());
  EXPECT_EQ(ops.poll(seconds(60), t0 + seconds(111)).code(), StatusCode::kTimeout);
}

TEST(PendingOpsTest, ADeviceErrorNamesTheOp) {
  PendingOps ops;
  auto a = std::make_shared<FakeOp>();
  a->device_error = Status::Internal("CUDA error cudaErrorLaunchFailure");
  add(ops, "reducescatter 'r'", a, Clock::now());
  Status st = ops.poll(seconds(60));
  EXPECT_EQ(st.to_string(), "Internal: reducescatter 'r': CUDA error cudaErrorLaunchFailure");
}

TEST(PendingOpsTest, FailAllFailsEveryPendingOpNamingItAndClosesTheSet) {
  PendingOps ops;
  const auto t0 = Clock::now();
  auto a = std::make_shared<FakeOp>(), b = std::make_shared<FakeOp>(),
       done = std::make_shared<FakeOp>();
  add(ops, "allreduce 'done'", done, t0);
  done->finished = true;
  EXPECT_TRUE(ops.poll(seconds(60), t0).ok());
  add(ops, "allreduce 'a'", a, t0);
  add(ops, "broadcast 'b'", b, t0);
  const Status peer = Status::PeerFailure("rank 2 (10.0.0.3:4000) closed the connection");
  EXPECT_EQ(ops.fail_all(peer), 2u);
  ASSERT_EQ(a->results.size(), 1u);
  ASSERT_EQ(b->results.size(), 1u);
  EXPECT_EQ(a->results[0].to_string(),
            "PeerFailure: allreduce 'a': rank 2 (10.0.0.3:4000) closed the connection");
  EXPECT_EQ(b->results[0].to_string(),
            "PeerFailure: broadcast 'b': rank 2 (10.0.0.3:4000) closed the connection");
  EXPECT_EQ(done->results.size(), 1u);  // completed before: not failed again
  EXPECT_EQ(ops.failure().code(), StatusCode::kPeerFailure);

  // Closed: a later op fails at once with the first reason; a second fail_all changes nothing.
  auto late = std::make_shared<FakeOp>();
  add(ops, "allreduce 'late'", late, t0);
  ASSERT_EQ(late->results.size(), 1u);
  EXPECT_EQ(late->results[0].to_string(),
            "PeerFailure: allreduce 'late': rank 2 (10.0.0.3:4000) closed the connection");
  EXPECT_EQ(ops.fail_all(Status::Timeout("later")), 0u);
  EXPECT_EQ(ops.failure().code(), StatusCode::kPeerFailure);
  EXPECT_EQ(ops.size(), 0u);
  EXPECT_EQ(ops.poll(seconds(60)).to_string(),  // closed: never OK again
            "PeerFailure: rank 2 (10.0.0.3:4000) closed the connection");
}

// The abort order: close, abort the communicator, fail_all. An aborted kernel exits and its
// event fires, so between close and fail_all a finished query means nothing: no op may
// complete OK, and the ops fail with close()'s reason, not a later caller's.
TEST(PendingOpsTest, CloseBeforeFailAllCompletesNothingAndKeepsTheFirstReason) {
  PendingOps ops;
  const auto t0 = Clock::now();
  auto a = std::make_shared<FakeOp>(), b = std::make_shared<FakeOp>();
  add(ops, "allreduce 'a'", a, t0);
  add(ops, "allreduce 'b'", b, t0);
  const Status peer = Status::PeerFailure("rank 1 (gpu-2:4000) closed the connection");
  ops.close(peer);
  a->finished = b->finished = true;  // the abort ended their kernels
  EXPECT_EQ(ops.poll(seconds(60), t0).to_string(), peer.to_string());
  EXPECT_TRUE(a->results.empty());
  EXPECT_TRUE(b->results.empty());
  EXPECT_EQ(ops.size(), 2u);  // still pending: NCCL may be writing their buffers
  EXPECT_EQ(ops.failure().to_string(), peer.to_string());
  // Closed, the abort still inside ncclCommAbort: a new op is not failed yet either (NCCL may
  // still write its buffers, fence() queued work for it before it saw the close).
  auto late = std::make_shared<FakeOp>();
  add(ops, "allreduce 'late'", late, t0);
  EXPECT_TRUE(late->results.empty());
  // A second caller (the watchdog's own error) comes later: the first reason stays.
  EXPECT_EQ(ops.fail_all(Status::Internal("ncclCommGetAsyncError: ncclSystemError")), 3u);
  ASSERT_EQ(late->results.size(), 1u);
  EXPECT_EQ(late->results[0].to_string(),
            "PeerFailure: allreduce 'late': rank 1 (gpu-2:4000) closed the connection");
  ASSERT_EQ(a->results.size(), 1u);
  ASSERT_EQ(b->results.size(), 1u);
  EXPECT_EQ(a->results[0].to_string(),
            "PeerFailure: allreduce 'a': rank 1 (gpu-2:4000) closed the connection");
  EXPECT_EQ(b->results[0].to_string(),
            "PeerFailure: allreduce 'b': rank 1 (gpu-2:4000) closed the connection");
}

TEST(PendingOpsTest, AnOpWhoseQueryRacesWithCloseIsNotCompleted) {
  // The watchdog queried the event (done: the abort ended the kernel) while another thread
  // closed the set: poll re-checks under the lock and completes nothing.
  PendingOps ops;
  std::vector<Status> results;
  const Status timeout = Status::Timeout("allreduce 'x': did not complete within 1.0 s");
  ops.add(
      "allreduce 'x'",
      [&]() -> Result<bool> {
        ops.close(timeout);
        return true;
      },
      [&](const Status& st) { results.push_back(st); });
  EXPECT_EQ(ops.poll(seconds(60)).to_string(), timeout.to_string());
  EXPECT_TRUE(results.empty());
  EXPECT_EQ(ops.fail_all(timeout), 1u);
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].code(), StatusCode::kTimeout);
}

TEST(PendingOpsTest, AnOpAddedAfterFailAllFailsAtOnceWithTheFirstReason) {
  PendingOps ops;
  const Status timeout = Status::Timeout("allreduce 'x': did not complete within 1.0 s");
  EXPECT_EQ(ops.fail_all(timeout), 0u);
  auto late = std::make_shared<FakeOp>();
  add(ops, "broadcast 'y'", late, Clock::now());
  ASSERT_EQ(late->results.size(), 1u);
  EXPECT_EQ(late->results[0].to_string(),
            "Timeout: broadcast 'y': allreduce 'x': did not complete within 1.0 s");
  EXPECT_EQ(ops.size(), 0u);
}

TEST(PendingOpsTest, AnIdleWaitBlocksUntilAnOpIsAddedOrShutdown) {
  // The watchdog of an idle backend sleeps on the condition variable, however long the
  // interval it passes: it wakes for an add() (then polls at the interval) and for shutdown().
  PendingOps ops;
  std::atomic<int> wakeups{0};
  std::atomic<bool> running{true};
  std::thread watchdog([&] {
    while (ops.wait(std::chrono::microseconds(1))) ++wakeups;
    running = false;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(wakeups.load(), 0);  // 50 ms idle: not one wake-up at a 1 us interval
  auto op = std::make_shared<FakeOp>();
  add(ops, "allreduce 'a'", op, Clock::now());
  while (wakeups.load() == 0) std::this_thread::yield();  // woken by the add
  EXPECT_TRUE(ops.poll(seconds(60)).ok());
  op->finished = true;
  EXPECT_TRUE(ops.poll(seconds(60)).ok());
  ASSERT_EQ(op->results.size(), 1u);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // idle again: it blocks
  const int idle = wakeups.load();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(wakeups.load(), idle);
  ops.shutdown();
  watchdog.join();
  EXPECT_FALSE(running.load());
  EXPECT_FALSE(ops.wait(std::chrono::seconds(60)));  // after shutdown: at once
}

TEST(PendingOpsTest, CloseWithOkReadsAsAborted) {
  PendingOps ops;
  ops.close(Status::Ok());
  EXPECT_EQ(ops.failure().to_string(), "Aborted: communicator closed");
}

TEST(PendingOpsTest, DoneMayAddTheNextOp) {
  // done runs outside the lock: a completion callback that submits more work must not
  // deadlock (a training loop's hook does exactly that).
  PendingOps ops;
  auto second = std::make_shared<FakeOp>();
  bool added = false;
  ops.add(
      "first", []() -> Result<bool> { return true; },
      [&](const Status&) {
        add(ops, "second", second, Clock::now());
        added = true;
      });
  EXPECT_TRUE(ops.poll(seconds(60)).ok());
  EXPECT_TRUE(added);
  EXPECT_EQ(ops.size(), 1u);
}

}  // namespace
}  // namespace kolo::nccl
