#include "coordinator/controller.h"

#include <gtest/gtest.h>

namespace kolo::coord {
namespace {

using Clock = std::chrono::steady_clock;

Request ar(const std::string& name, std::vector<int64_t> shape) {
  Request q;
  q.name = name;
  q.shapes = {std::move(shape)};
  return q;
}

RequestList list_of(std::vector<Request> qs) {
  RequestList l;
  l.requests = std::move(qs);
  return l;
}

TEST(ControllerTest, RespondsOnceEveryRankSubmittedInFirstRequestOrder) {
  Controller c(2, {});
  ResponseCache cache(8);
  auto t = Clock::now();
  c.add(0, list_of({ar("b", {2}), ar("a", {2})}), cache, t);
  EXPECT_TRUE(c.respond(t).responses.empty());
  c.add(1, list_of({ar("a", {2})}), cache, t);
  auto out = c.respond(t);
  ASSERT_EQ(out.responses.size(), 1u);
  EXPECT_EQ(out.responses[0].name, "a");
  c.add(1, list_of({ar("b", {2})}), cache, t);
  out = c.respond(t);
  ASSERT_EQ(out.responses.size(), 1u);
  EXPECT_EQ(out.responses[0].name, "b");
  EXPECT_EQ(out.responses[0].kind, Response::Kind::kExecute);
  EXPECT_EQ(c.pending(), 0u);
}

TEST(ControllerTest, ShapeMismatchNamesTensorRanksAndValues) {
  Controller c(3, {});
  ResponseCache cache(0);
  auto t = Clock::now();
  c.add(0, list_of({ar("w", {4, 3})}), cache, t);
  c.add(1, list_of({ar("w", {4, 3})}), cache, t);
  c.add(2, list_of({ar("w", {4, 5})}), cache, t);
  auto out = c.respond(t);
  ASSERT_EQ(out.responses.size(), 1u);
  const Response& p = out.responses[0];
  EXPECT_EQ(p.kind, Response::Kind::kError);
  EXPECT_EQ(p.error_code, StatusCode::kMismatch);
  EXPECT_EQ(
      p.error,
      "allreduce 'w': shape differs across ranks: ranks [0, 1] have [4, 3]; rank 2 has [4, 5]");
}

TEST(ControllerTest, DeviceKindMustAgreeButOrdinalsMayDiffer) {
  // Each rank's tensor lives on its own GPU: cuda:0 on rank 0 and cuda:1 on rank 1 agree.
  auto t = Clock::now();
  ResponseCache cache(0);
  Controller c(2, {});
  Request q0 = ar("g", {2}), q1 = ar("g", {2}), q2 = ar("h", {2});
  q0.device = Device::cuda(0);
  q1.device = Device::cuda(1);
  q2.device = Device::cuda(0);
  c.add(0, list_of({q0, q2}), cache, t);
  c.add(1, list_of({q1, ar("h", {2})}), cache, t);
  auto out = c.respond(t);
  ASSERT_EQ(out.responses.size(), 2u);
  EXPECT_EQ(out.responses[0].kind, Response::Kind::kExecute);
  EXPECT_EQ(out.responses[1].kind, Response::Kind::kError);
  EXPECT_EQ(out.responses[1].error,
            "allreduce 'h': device type differs across ranks: rank 0 has cuda; rank 1 has cpu");
}

TEST(ControllerTest, OtherMismatches) {
  auto t = Clock::now();
  ResponseCache cache(0);
  {
    Controller c(2, {});
    Request a = ar("x", {1}), b = ar("x", {1});
    b.dtype = DataType::kInt32;
    c.add(0, list_of({a}), cache, t);
    c.add(1, list_of({b}), cache, t);
    EXPECT_EQ(c.respond(t).responses[0].error,
              "allreduce 'x': dtype differs across ranks: rank 0 has float32; rank 1 has int32");
  }
  {
    Controller c(2, {});
    Request a = ar("x", {1}), b = ar("x", {1});
    a.type = b.type = OpType::kBroadcast;
    b.root = 1;
    c.add(0, list_of({a}), cache, t);
    c.add(1, list_of({b}), cache, t);
    EXPECT_EQ(c.respond(t).responses[0].error,
              "broadcast 'x': root differs across ranks: rank 0 has 0; rank 1 has 1");
  }
  {
    Controller c(2, {});
    Request a = ar("x", {1}), b = ar("x", {1});
    b.type = OpType::kAllgather;
    c.add(0, list_of({a}), cache, t);
    c.add(1, list_of({b}), cache, t);
    EXPECT_EQ(c.respond(t).responses[0].error,
              "allreduce 'x': operation differs across ranks: rank 0 has allreduce; rank 1 has "
              "allgather");
  }
}

TEST(ControllerTest, AllgatherFirstDimensionMayDiffer) {
  Controller c(2, {});
  ResponseCache cache(0);
  auto t = Clock::now();
  Request a = ar("g", {2, 3}), b = ar("g", {5, 3});
  a.type = b.type = OpType::kAllgather;
  c.add(0, list_of({a}), cache, t);
  c.add(1, list_of({b}), cache, t);
  auto out = c.respond(t);
  ASSERT_EQ(out.responses.size(), 1u);
  EXPECT_EQ(out.responses[0].kind, Response::Kind::kExecute);
  EXPECT_EQ(out.responses[0].rank_dims, (std::vector<int64_t>{2, 5}));
}

TEST(ControllerTest, JoinedRanksCountAsSubmittedAndJoinCompletes) {
  Controller c(2, {});
  ResponseCache cache(0);
  auto t = Clock::now();
  RequestList join;
  join.join = true;
  c.add(1, join, cache, t);
  c.add(0, list_of({ar("a", {3})}), cache, t);
  auto out = c.respond(t);
  ASSERT_EQ(out.responses.size(), 1u);
  EXPECT_EQ(out.responses[0].joined, (std::vector<int32_t>{1}));
  EXPECT_EQ(out.joined, (std::vector<int32_t>{1}));
  c.add(0, join, cache, t);
  out = c.respond(t);
  ASSERT_EQ(out.responses.size(), 1u);
  EXPECT_EQ(out.responses[0].type, OpType::kJoin);
  EXPECT_TRUE(out.joined.empty());
}

// Note [Join]: as Horovod's, only allreduce and barrier run while a rank has joined.
TEST(ControllerTest, WhileARankHasJoinedOnlyAllreduceAndBarrierRun) {
  Controller c(3, {});
  ResponseCache cache(0);
  auto t = Clock::now();
  RequestList join;
  join.join = true;
  c.add(1, join, cache, t);
  Request bcast = ar("x", {4});
  bcast.type = OpType::kBroadcast;
  bcast.root = 0;  // the root has not joined: refused all the same
  Request gather = ar("g", {4});
  gather.type = OpType::kAllgather;
  Request barrier;
  barrier.name = "b";
  barrier.type = OpType::kBarrier;
  for (int r : {0, 2}) c.add(r, list_of({ar("a", {3}), bcast, gather, barrier}), cache, t);
  auto out = c.respond(t);
  ASSERT_EQ(out.responses.size(), 4u);
  EXPECT_EQ(out.responses[0].kind, Response::Kind::kExecute);  // a
  EXPECT_EQ(out.responses[0].joined, (std::vector<int32_t>{1}));
  EXPECT_EQ(out.responses[1].kind, Response::Kind::kError);
  EXPECT_EQ(out.responses[1].error_code, StatusCode::kMismatch);
  EXPECT_EQ(out.responses[1].error,
            "broadcast 'x': cannot run while rank 1 has joined (join supports allreduce and "
            "barrier only, as Horovod's)");
  EXPECT_EQ(out.responses[2].error,
            "allgather 'g': cannot run while rank 1 has joined (join supports allreduce and "
            "barrier only, as Horovod's)");
  EXPECT_EQ(out.responses[3].kind, Response::Kind::kExecute);  // b
}

TEST(ControllerTest, CachedNamesSentAgainAreEvicted) {
  Controller c(2, {});
  ResponseCache cache(4);
  Request a = ar("a", {3});
  Response p;
  p.name = "a";
  cache.put(p, &a);
  auto t = Clock::now();
  c.add(0, list_of({ar("a", {4})}), cache, t);
  auto out = c.respond(t);
  EXPECT_EQ(out.evictions, (std::vector<std::string>{"a"}));
}

TEST(ControllerTest, StallInspectorNamesMissingRanksAndCanFailTheJob) {
  std::vector<std::vector<int>> reported;
  Controller c(3, StallConfig{std::chrono::seconds(1), std::chrono::seconds(5),
                              [&](const std::vector<int>& stuck) { reported.push_back(stuck); }});
  ResponseCache cache(0);
  auto t = Clock::now();
  c.add(0, list_of({ar("slow", {1})}), cache, t);
  c.add(2, list_of({ar("slow", {1})}), cache, t);
  c.respond(t);
  EXPECT_TRUE(c.take_warnings().empty());
  auto out = c.respond(t + std::chrono::seconds(2));
  auto warnings = c.take_warnings();
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("allreduce 'slow' was submitted by ranks [0, 2]"), std::string::npos)
      << warnings[0];
  EXPECT_NE(warnings[0].find("still waiting for ranks [1]"), std::string::npos) << warnings[0];
  EXPECT_TRUE(out.fatal.empty());
  c.respond(t + std::chrono::seconds(3));
  EXPECT_TRUE(c.take_warnings().empty());  // warned once
  EXPECT_TRUE(reported.empty());
  out = c.respond(t + std::chrono::seconds(6));
  EXPECT_NE(out.fatal.find("KOLO_STALL_SHUTDOWN_TIME"), std::string::npos) << out.fatal;
  EXPECT_EQ(reported, (std::vector<std::vector<int>>{{1}}));  // once, naming the stuck rank
}

// A point-to-point pair's Controller names its ranks 0 and 1 by their job ranks, roots too.
TEST(ControllerTest, RankNamesNameRanksAndRootsInMessages) {
  Controller c(2, StallConfig{std::chrono::seconds(1), {}, {}}, /*rank_names=*/{3, 5});
  ResponseCache cache(0);
  auto t = Clock::now();
  Request a = ar("act", {4}), b = ar("act", {5});
  a.type = b.type = OpType::kBroadcast;
  c.add(0, list_of({a}), cache, t);
  c.add(1, list_of({b}), cache, t);
  auto out = c.respond(t);
  ASSERT_EQ(out.responses.size(), 1u);
  EXPECT_EQ(out.responses[0].error,
            "broadcast 'act': shape differs across ranks: rank 3 has [4]; rank 5 has [5]");
  b = a;
  b.root = 1;
  c.add(0, list_of({a}), cache, t);
  c.add(1, list_of({b}), cache, t);
  out = c.respond(t);
  ASSERT_EQ(out.responses.size(), 1u);
  EXPECT_EQ(out.responses[0].error,
            "broadcast 'act': root differs across ranks: rank 3 has 3; rank 5 has 5");
  c.add(1, list_of({b}), cache, t);
  c.respond(t + std::chrono::seconds(2));
  auto warnings = c.take_warnings();
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("submitted by ranks [5]"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("still waiting for ranks [3]"), std::string::npos) << warnings[0];
}

// Note [Mismatched collectives].
StallConfig mismatch_after(std::chrono::seconds bound) {
  StallConfig s;
  s.check_time = std::chrono::nanoseconds(0);
  s.mismatch_time = bound;
  return s;
}

Request of(OpType type, const std::string& name) {
  Request q;
  q.name = name;
  q.type = type;
  if (type != OpType::kBarrier) q.shapes = {{4}};
  return q;
}

TEST(ControllerTest, RanksBlockedInDifferentOperationsFailNamingEachRanksOperations) {
  Controller c(3, mismatch_after(std::chrono::seconds(5)));
  ResponseCache cache(0);
  const auto t = Clock::now();
  c.add(0, list_of({of(OpType::kBroadcast, "x")}), cache, t);
  c.add(1, list_of({of(OpType::kBarrier, "b")}), cache, t);
  c.add(2, list_of({of(OpType::kAllreduce, "y"), of(OpType::kBroadcast, "x")}), cache, t);
  EXPECT_TRUE(c.respond(t).responses.empty());  // the state starts: the clock starts
  EXPECT_TRUE(c.respond(t + std::chrono::seconds(4)).responses.empty());
  auto out = c.respond(t + std::chrono::seconds(5));
  ASSERT_EQ(out.responses.size(), 3u);
  const std::string want =
      "mismatched collectives: rank 0 waits in broadcast 'x'; rank 1 waits in barrier 'b'; "
      "rank 2 waits in broadcast 'x' and allreduce 'y'; no operation is pending on every rank, "
      "and none moved for 5.0 s (KOLO_MISMATCH_TIME=5.0 s): the ranks called different "
      "collectives, "
      "or the same ones in a different order and wait on them one by one";
  // In the order they were first requested, each failing on every rank with the same message.
  EXPECT_EQ(out.responses[0].name, "x");
  EXPECT_EQ(out.responses[1].name, "b");
  EXPECT_EQ(out.responses[2].name, "y");
  for (const Response& p : out.responses) {
    EXPECT_EQ(p.kind, Response::Kind::kError);
    EXPECT_EQ(p.error_code, StatusCode::kMismatch);
    EXPECT_EQ(p.error, want);
  }
  EXPECT_EQ(c.pending(), 0u);
}

TEST(ControllerTest, ALateRankIsNoMismatchHoweverLongItTakes) {
  Controller c(2, mismatch_after(std::chrono::seconds(1)));
  ResponseCache cache(0);
  const auto t = Clock::now();
  c.add(0, list_of({of(OpType::kBroadcast, "x"), of(OpType::kAllreduce, "y")}), cache, t);
  for (int s = 0; s <= 60; s += 5)  // rank 1 has nothing pending: it is late, not mismatched
    EXPECT_TRUE(c.respond(t + std::chrono::seconds(s)).responses.empty()) << s;
  c.add(1, list_of({of(OpType::kBroadcast, "x")}), cache, t + std::chrono::seconds(61));
  auto out = c.respond(t + std::chrono::seconds(61));
  ASSERT_EQ(out.responses.size(), 1u);
  EXPECT_EQ(out.responses[0].kind, Response::Kind::kExecute);
}

TEST(ControllerTest, ProgressAndNewRequestsRestartTheMismatchClock) {
  Controller c(2, mismatch_after(std::chrono::seconds(2)));
  ResponseCache cache(0);
  const auto t = Clock::now();
  auto at = [&](int s) { return t + std::chrono::seconds(s); };
  c.add(0, list_of({of(OpType::kAllreduce, "a")}), cache, at(0));
  c.add(1, list_of({of(OpType::kAllreduce, "b")}), cache, at(0));
  EXPECT_TRUE(c.respond(at(0)).responses.empty());
  // Rank 1 submits "a" too before the bound: "a" runs, and the disjoint state restarts.
  c.add(1, list_of({of(OpType::kAllreduce, "a")}), cache, at(1));
  auto out = c.respond(at(1));
  ASSERT_EQ(out.responses.size(), 1u);
  EXPECT_EQ(out.responses[0].kind, Response::Kind::kExecute);
  // Rank 0 now waits in "c", rank 1 in "b": disjoint from 2 s on, so not yet failed at 3 s.
  c.add(0, list_of({of(OpType::kAllreduce, "c")}), cache, at(2));
  EXPECT_TRUE(c.respond(at(2)).responses.empty());
  EXPECT_TRUE(c.respond(at(3)).responses.empty());
  out = c.respond(at(4));
  ASSERT_EQ(out.responses.size(), 2u);
  EXPECT_EQ(out.responses[0].error_code, StatusCode::kMismatch);
  EXPECT_NE(out.responses[0].error.find("rank 0 waits in allreduce 'c'; rank 1 waits in "
                                        "allreduce 'b'"),
            std::string::npos)
      << out.responses[0].error;
}

TEST(ControllerTest, RanksWaitingInTheSameOperationsAreNamedTogether) {
  Controller c(5, mismatch_after(std::chrono::seconds(1)));
  ResponseCache cache(0);
  const auto t = Clock::now();
  RequestList join;
  join.join = true;
  c.add(3, join, cache, t);
  c.add(4, join, cache, t);
  for (int r : {0, 2}) c.add(r, list_of({of(OpType::kAllreduce, "x")}), cache, t);
  c.add(1, list_of({of(OpType::kBarrier, "b")}), cache, t);
  EXPECT_TRUE(c.respond(t).responses.empty());
  auto out = c.respond(t + std::chrono::seconds(1));
  ASSERT_EQ(out.responses.size(), 2u);
  EXPECT_EQ(out.responses[0].error.substr(0, 120),
            "mismatched collectives: ranks [0, 2] wait in allreduce 'x'; rank 1 waits in barrier "
            "'b'; ranks [3, 4] have joined; no op");
}

TEST(ControllerTest, AJoinedRankIsNotWaitedForAndZeroTurnsTheCheckOff) {
  {
    Controller c(3, mismatch_after(std::chrono::seconds(1)));
    ResponseCache cache(0);
    const auto t = Clock::now();
    RequestList join;
    join.join = true;
    c.add(2, join, cache, t);
    c.add(0, list_of({of(OpType::kAllreduce, "a")}), cache, t);
    c.add(1, list_of({of(OpType::kAllreduce, "b")}), cache, t);
    EXPECT_TRUE(c.respond(t).responses.empty());
    auto out = c.respond(t + std::chrono::seconds(1));
    ASSERT_EQ(out.responses.size(), 2u);
    EXPECT_NE(
        out.responses[0].error.find(
            "rank 0 waits in allreduce 'a'; rank 1 waits in allreduce 'b'; rank 2 has joined"),
        std::string::npos)
        << out.responses[0].error;
  }
  Controller off(2, mismatch_after(std::chrono::seconds(0)));
  ResponseCache cache(0);
  const auto t = Clock::now();
  off.add(0, list_of({of(OpType::kAllreduce, "a")}), cache, t);
  off.add(1, list_of({of(OpType::kAllreduce, "b")}), cache, t);
  for (int s = 0; s <= 60; s += 20)
    EXPECT_TRUE(off.respond(t + std::chrono::seconds(s)).responses.empty());
}

}  // namespace
}  // namespace kolo::coord
