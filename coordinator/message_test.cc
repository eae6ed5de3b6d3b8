#include "coordinator/message.h"

#include <gtest/gtest.h>

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
  list.tune = {
      .apply_step = 12, .fusion_threshold = 1 << 20, .cycle_time_ns = 500000, .bucket_bytes = 0};
  auto parsed = parse_response_list(serialize(list));
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  EXPECT_EQ(*parsed, list);
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
