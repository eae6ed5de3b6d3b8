#include "coordinator/message.h"

#include <gtest/gtest.h>

#include <cstring>

#include "common/knobs.h"

namespace kolo::coord {
namespace {

TEST(MessageTest, RequestListRoundTrips) {
  RequestList list;
  list.join = true;
  Request q;
  q.name = "grad.w";
  q.type = OpType::kAlltoall;
  q.dtype = DataType::kBFloat16;
  q.device = Device::cuda(1);
  q.reduction.op = ReduceOp::kMax;
  q.reduction.prescale = 0.5;
  q.root = 3;
  q.shapes = {{4, 3}, {}};
  q.splits = {1, 3};
  list.requests = {q, Request{}};
  auto parsed = parse_request_list(serialize(list));
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  EXPECT_EQ(*parsed, list);
}

TEST(MessageTest, ResponseListRoundTrips) {
  ResponseList list;
  list.shutdown_rank = 2;
  list.fatal = "boom";
  list.joined = {1};
  list.evictions = {"a", "b"};
  Response p;
  p.kind = Response::Kind::kError;
  p.name = "x";
  p.error_code = StatusCode::kMismatch;
  p.error = "shape differs";
  p.rank_dims = {1, 2, 3};
  p.joined = {1};
  list.responses = {p};
  list.tune = {.apply_step = 12,
               .fusion_threshold = 1 << 20,
               .cycle_time_ns = 500000,
               .bucket_bytes = 0,
               .choices = {{static_cast<int32_t>(KnobId::kHierarchicalAllreduce), 1}}};
  auto parsed = parse_response_list(serialize(list));
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  EXPECT_EQ(*parsed, list);
}

// A decision's choices: every prefix of the bytes is rejected (truncated count or pair), and so
// is a knob outside the registry, a negative choice, and a count beyond the bytes left.
TEST(MessageTest, MalformedTuneChoicesAreRejectedNamingThem) {
  ResponseList list;
  list.tune.apply_step = 3;
  list.tune.choices = {{static_cast<int32_t>(KnobId::kHierarchicalAllreduce), 0}};
  const std::string bytes = serialize(list);
  for (size_t n = 0; n < bytes.size(); ++n)
    EXPECT_FALSE(parse_response_list(bytes.substr(0, n)).ok()) << "prefix of " << n << " bytes";
  // The last 8 bytes are the pair (knob, choice), the 8 before them the count.
  auto with = [&](size_t at, int32_t v) {
    std::string b = bytes;
    std::memcpy(b.data() + b.size() - at, &v, sizeof v);
    return parse_response_list(b).status();
  };
  Status knob = with(8, static_cast<int32_t>(kKnobCount));
  EXPECT_EQ(knob.code(), StatusCode::kInternal);
  EXPECT_NE(knob.message().find("tune choice has invalid knob " + std::to_string(kKnobCount)),
            std::string::npos)
      << knob.to_string();
  EXPECT_FALSE(with(4, -1).ok());
  EXPECT_NE(with(16, 1000).message().find("tune choices claims 1000 items"), std::string::npos);
}

TEST(MessageTest, TruncatedAndCorruptInputIsRejected) {
  RequestList list;
  Request q;
  q.name = "abc";
  q.shapes = {{2, 2}};
  list.requests = {q};
  std::string bytes = serialize(list);
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto parsed = parse_request_list(bytes.substr(0, n));
    EXPECT_FALSE(parsed.ok()) << "prefix of " << n << " bytes parsed";
  }
  std::string corrupt = bytes;
  corrupt[2] = '\x7f';  // request count low byte: far more requests than bytes
  EXPECT_EQ(parse_request_list(corrupt).status().code(), StatusCode::kInternal);
  EXPECT_FALSE(parse_request_list(bytes + "x").ok());
}

}  // namespace
}  // namespace kolo::coord
