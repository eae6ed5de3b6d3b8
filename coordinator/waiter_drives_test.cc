// Note [Waiter drives] (runtime.cc): a blocking call's caller runs the cycles itself, and
// everything the background thread promised still holds: callbacks on the background thread,
// shutdown and failures ending every waiter.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "coordinator/test_cluster.h"
#include "kolo/kolo.h"

namespace kolo::coord {
namespace {

using namespace std::chrono_literals;
using testkit::Cluster;
using testkit::test_config;

// As kolo::allreduce submits: the caller waits at once, so the background thread is not woken.
Handle blocking_allreduce(Runtime& rt, const std::string& name, std::vector<float>& v) {
  auto view = view_of(v.data(), {static_cast<int64_t>(v.size())});
  auto e = build_allreduce(name, view, view, {});
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  (*e)->caller_waits = true;
  return rt.submit(std::move(*e));
}

// A heartbeat far beyond the test: the background thread then has no reason of its own to run.
RuntimeConfig quiet_config() {
  RuntimeConfig c = test_config();
  c.heartbeat = 30s;
  return c;
}

TEST(WaiterDrives, BlockingCallsRunTheirCyclesOnTheCallersThread) {
  constexpr int kCalls = 200;
  Cluster c(2, quiet_config());
  c.each([&](int r) {
    for (int i = 0; i < kCalls; ++i) {
      std::vector<float> v(3, r + 1.0f);
      ASSERT_TRUE(blocking_allreduce(c[r], "x", v).wait().ok());
      ASSERT_EQ(v, std::vector<float>(3, 3.0f)) << "call " << i;
    }
  });
  // Each call takes one or two cycles; the background thread may run the first few (it spins
  // briefly after starting), never most.
  for (int r = 0; r < 2; ++r)
    EXPECT_GE(c[r].cycles_run_by_callers(), kCalls * 3 / 4) << "rank " << r;
}

TEST(WaiterDrives, CallbacksOfACallersCycleStillRunOnTheBackgroundThread) {
  Cluster c(2, quiet_config());
  c.each([&](int r) {
    const auto caller = std::this_thread::get_id();
    // then() on an operation already complete runs the callback at once, in then() itself,
    // as Handle::then says; any other run on this thread is a driven cycle's.
    std::atomic<bool> in_then{false};
    std::atomic<int> misplaced{0};
    auto then = [&](Handle& h, std::atomic<bool>& ran) {
      in_then = true;
      h.then([&](const Status& s) {
        EXPECT_TRUE(s.ok()) << s.to_string();
        if (std::this_thread::get_id() == caller && !in_then) ++misplaced;
        ran = true;
      });
      in_then = false;
    };
    for (int i = 0; i < 50; ++i) {
      std::vector<float> a(2, 1.0f), b(2, 1.0f);
      std::atomic<bool> ran_a{false}, ran_b{false};
      Handle ha = testkit::allreduce(c[r], "a", a);
      then(ha, ran_a);
      Handle hb = blocking_allreduce(c[r], "b", b);
      then(hb, ran_b);
      ASSERT_TRUE(hb.wait().ok());
      EXPECT_TRUE(ran_b) << "wait() returned before the callback ran (call " << i << ")";
      ASSERT_TRUE(ha.wait().ok());
      EXPECT_TRUE(ran_a) << "wait() returned before the callback ran (call " << i << ")";
      EXPECT_EQ(a, std::vector<float>(2, 2.0f));
      EXPECT_EQ(b, std::vector<float>(2, 2.0f));
    }
    EXPECT_EQ(misplaced.load(), 0) << "callbacks run on the waiting caller's thread";
  });
  for (int r = 0; r < 2; ++r) EXPECT_GT(c[r].cycles_run_by_callers(), 0) << "rank " << r;
}

TEST(WaiterDrives, SeveralBlockingCallersOnARankShareTheTurn) {
  // Three threads per rank, each with its own names: one drives at a time, the others wait
  // for it or for the background thread, which a caller ending its turn wakes.
  constexpr int kThreads = 3, kCalls = 100;
  Cluster c(2, quiet_config());
  c.each([&](int r) {
    std::vector<std::thread> callers;
    for (int t = 0; t < kThreads; ++t)
      callers.emplace_back([&, t] {
        for (int i = 0; i < kCalls; ++i) {
          std::vector<float> v(4, (r + 1.0f) * (t + 1));
          const std::string name = "t" + std::to_string(t) + "." + std::to_string(i);
          ASSERT_TRUE(blocking_allreduce(c[r], name, v).wait().ok()) << name;
          ASSERT_EQ(v, std::vector<float>(4, 3.0f * (t + 1))) << name;
        }
      });
    for (auto& t : callers) t.join();
  });
  for (int r = 0; r < 2; ++r) EXPECT_GT(c[r].cycles_run_by_callers(), 0) << "rank " << r;
}

TEST(WaiterDrives, ShutdownEndsACallerWaitingInsideACycle) {
  Cluster c(2, quiet_config());
  std::this_thread::sleep_for(20ms);  // past the background thread's first watch of its queue
  Status got;
  std::thread waiter([&] {
    std::vector<float> v(1, 1.0f);
    got = blocking_allreduce(c[1], "never", v).wait();  // rank 0 never submits it
  });
  std::this_thread::sleep_for(100ms);  // the caller is in its cycles, waiting for rank 0
  EXPECT_GT(c[1].cycles_run_by_callers(), 0);
  ASSERT_TRUE(c[0].shutdown().ok());
  waiter.join();
  EXPECT_EQ(got.code(), StatusCode::kAborted) << got.to_string();
  EXPECT_NE(got.message().find("rank 0 called shutdown()"), std::string::npos) << got.to_string();
  std::vector<float> w(1, 1.0f);
  EXPECT_EQ(blocking_allreduce(c[1], "later", w).wait().code(), StatusCode::kAborted);
}

TEST(WaiterDrives, AFailureInACallersCycleFailsItAndEveryLaterOperation) {
  // Rank 1 never starts: the caller's own cycle times out in negotiation.
  Cluster c(2, quiet_config(), 300ms, /*start_ranks=*/1);
  // The background thread watches its queue for 50 us after its start, then sleeps until
  // its heartbeat; after that, the caller's submission is the caller's to run.
  std::this_thread::sleep_for(20ms);
  std::vector<float> v(1, 1.0f), w(1, 1.0f);
  Handle h = blocking_allreduce(c[0], "orphan", v);
  const Status st = h.wait();
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("negotiation"), std::string::npos) << st.to_string();
  EXPECT_GT(c[0].cycles_run_by_callers(), 0);
  EXPECT_EQ(blocking_allreduce(c[0], "later", w).wait().message(), st.message());
  EXPECT_EQ(c[0].failure().message(), st.message());
}

TEST(WaiterDrives, WaitsOnAsynchronousHandlesLeaveTheCyclesToTheBackgroundThread) {
  Cluster c(2, quiet_config());
  std::this_thread::sleep_for(20ms);  // the background threads asleep: the turn is free
  c.each([&](int r) {
    for (int i = 0; i < 20; ++i) {
      std::vector<float> v(1, 1.0f), w(1, 1.0f);
      ASSERT_TRUE(testkit::allreduce(c[r], "t", v).wait().ok());
      ASSERT_TRUE(testkit::allreduce(c[r], "u", w).wait(10s).ok());
      EXPECT_EQ(v[0], 2.0f);
      EXPECT_EQ(w[0], 2.0f);
    }
  });
  for (int r = 0; r < 2; ++r) EXPECT_EQ(c[r].cycles_run_by_callers(), 0) << "rank " << r;
}

// The public blocking call marks its submission (Entry::caller_waits) as the tests above do by
// hand: a one-rank job (kolo::init() without a launcher) runs kolo::allreduce's cycles on the
// caller's thread.
TEST(WaiterDrives, TheBlockingApiRunsItsCyclesOnTheCallersThread) {
  ASSERT_TRUE(kolo::init().ok());
  std::this_thread::sleep_for(20ms);  // past the background thread's first watch of its queue
  std::shared_ptr<Runtime> rt = global_runtime();
  ASSERT_NE(rt, nullptr);
  const int64_t before = rt->cycles_run_by_callers();
  for (int i = 0; i < 100; ++i) {
    float x = 2.0f;
    ASSERT_TRUE(kolo::allreduce("x", view_of(&x, {1})).ok());
    ASSERT_EQ(x, 2.0f);
  }
  EXPECT_GE(rt->cycles_run_by_callers() - before, 75);
  rt.reset();
  ASSERT_TRUE(kolo::shutdown().ok());
}

}  // namespace
}  // namespace kolo::coord
