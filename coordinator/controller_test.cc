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

TEST(ControllerTest, CachedNamesSentAgainAreEvicted) {
  Controller c(2, {});
  ResponseCache cache(4);
  Request a = ar("a", {3});
  Response p;
  p.name = "a";
  cache.put(p, a);
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

}  // namespace
}  // namespace kolo::coord
