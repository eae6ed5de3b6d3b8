// ChannelBackend over thread channels: every collective end to end through the Backend
// interface, argument validation before sending, and the tuning variables.
#include "backends/channel_backend.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "common/knobs.h"
#include "ops/thread_channel.h"

namespace kolo {
namespace {

std::vector<std::unique_ptr<ChannelBackend>> make_backends(int p) {
  auto channels = ops::make_thread_channels(p, std::chrono::seconds(20));
  std::vector<std::unique_ptr<ChannelBackend>> out;
  for (auto& c : channels) out.push_back(std::make_unique<ChannelBackend>("test", std::move(c)));
  return out;
}

std::vector<Status> run(std::vector<std::unique_ptr<ChannelBackend>>& b,
                        const std::function<Status(Backend&)>& fn) {
  std::vector<Status> st(b.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < b.size(); ++r) threads.emplace_back([&, r] { st[r] = fn(*b[r]); });
  for (auto& t : threads) t.join();
  return st;
}

TEST(ChannelBackendTest, AllreduceOutOfPlaceAverageAndScaling) {
  for (int p : {1, 3, 4}) {
    auto b = make_backends(p);
    for (int64_t count : {int64_t{1}, int64_t{5}, int64_t{40000}}) {  // tree and ring
      std::vector<std::vector<float>> in(p), out(p);
      for (int r = 0; r < p; ++r) {
        in[r].assign(count, static_cast<float>(r + 1));
        out[r].assign(count, -1);
      }
      auto st = run(b, [&](Backend& be) {
        return be.allreduce(in[be.rank()].data(), out[be.rank()].data(), count, DataType::kFloat32,
                            {.op = ReduceOp::kAverage, .prescale = 2.0, .postscale = 0.5});
      });
      const float want = static_cast<float>(p + 1) / 2;  // mean of 1..p (times 2, times 0.5)
      for (int r = 0; r < p; ++r) {
        ASSERT_TRUE(st[r].ok()) << st[r].to_string();
        EXPECT_EQ(in[r][0], static_cast<float>(r + 1));  // input untouched
        for (float v : out[r]) ASSERT_EQ(v, want);
      }
    }
  }
}

TEST(ChannelBackendTest, AllgatherBroadcastAlltoallReducescatterBarrier) {
  const int p = 3;
  auto b = make_backends(p);
  auto st = run(b, [&](Backend& be) -> Status {
    const int r = be.rank();
    // allgather with counts {1, 0, 2}
    std::vector<int32_t> in(2, r * 10), out(3, -1);
    KOLO_RETURN_IF_ERROR(be.allgather(in.data(), out.data(), DataType::kInt32, {1, 0, 2}));
    if (out != std::vector<int32_t>{0, 20, 20}) return Status::Internal("allgather result");
    // broadcast from root 2
    std::vector<int64_t> d(7, r == 2 ? 42 : 0);
    KOLO_RETURN_IF_ERROR(be.broadcast(d.data(), 7, DataType::kInt64, 2));
    for (auto v : d)
      if (v != 42) return Status::Internal("broadcast result");
    // alltoall: one element to every rank, value r*10+j
    std::vector<int32_t> s = {r * 10, r * 10 + 1, r * 10 + 2}, g(3, -1);
    KOLO_RETURN_IF_ERROR(be.alltoall(s.data(), g.data(), DataType::kInt32, {1, 1, 1}, {1, 1, 1}));
    for (int j = 0; j < p; ++j)
      if (g[j] != j * 10 + r) return Status::Internal("alltoall result");
    // reducescatter sum, counts {2, 1, 0}
    std::vector<double> rs_in = {1, 2, 3}, rs_out(2, -1);
    KOLO_RETURN_IF_ERROR(
        be.reducescatter(rs_in.data(), rs_out.data(), DataType::kFloat64, {}, {2, 1, 0}));
    if (r == 0 && (rs_out[0] != 3 || rs_out[1] != 6)) return Status::Internal("reducescatter r0");
    if (r == 1 && rs_out[0] != 9) return Status::Internal("reducescatter r1");
    return be.barrier();
  });
  for (auto& s : st) EXPECT_TRUE(s.ok()) << s.to_string();
}

// Backend's public methods are the one place that checks arguments (the algorithms below trust
// them): every check, with its exact message, and nothing sent.
TEST(ChannelBackendTest, InvalidArgumentsAreReportedBeforeSending) {
  auto b = make_backends(2);
  Backend& be = *b[0];
  float x[4] = {1, 2, 3, 4};
  const DataType f32 = DataType::kFloat32;
  const DataType bad_dtype = static_cast<DataType>(42);
  const Reduction bad_op{static_cast<ReduceOp>(9)};
  struct Case {
    Status status;
    std::string want;
  };
  const Case cases[] = {
      {be.allreduce(x, x, -3, f32, {}), "allreduce: count of input must be >= 0, got -3"},
      {be.allreduce(nullptr, x, 3, f32, {}),
       "allreduce: input must be non-null when its count is > 0, got null with count 3"},
      {be.allreduce(x, nullptr, 3, f32, {}),
       "allreduce: output must be non-null when its count is > 0, got null with count 3"},
      {be.allreduce(x, x, 4, bad_dtype, {}),
       "allreduce: dtype must be one of uint8, int8, int32, int64, float16, bfloat16, float32, "
       "float64, int16, got enum value 42"},
      {be.allreduce(x, x, 4, f32, bad_op),
       "allreduce: reduce op must be one of sum, average, min, max, product, got enum value 9"},
      {be.allreduce(x, x, 4, f32, {ReduceOp::kSum, HUGE_VAL, 1.0}),
       "allreduce: prescale must be finite, got inf"},
      {be.allreduce(x, x, 4, f32, {ReduceOp::kSum, 1.0, std::nan("")}),
       "allreduce: postscale must be finite, got nan"},
      {be.reducescatter(x, x, f32, {}, {1}),
       "reducescatter: counts must have one entry per rank (2), got 1"},
      {be.reducescatter(x, x, f32, {}, {1, -2}), "reducescatter: counts[1] must be >= 0, got -2"},
      {be.reducescatter(x, x, f32, bad_op, {1, 1}), "reducescatter: reduce op must be one of"},
      {be.reducescatter(x, nullptr, f32, {}, {1, 1}), "reducescatter: output must be non-null"},
      {be.reducescatter(x, x, bad_dtype, {}, {1, 1}), "reducescatter: dtype must be one of"},
      {be.allgather(nullptr, x, f32, {1, 1}), "allgather: input must be non-null"},
      {be.allgather(x, x, f32, {1}), "allgather: counts must have one entry per rank (2), got 1"},
      {be.allgather(x, x, bad_dtype, {1, 1}), "allgather: dtype must be one of"},
      {be.broadcast(x, 4, f32, 2), "broadcast: root must be in [0, 2), got 2"},
      {be.broadcast(x, 4, f32, -1), "broadcast: root must be in [0, 2), got -1"},
      {be.broadcast(x, -1, f32, 0), "broadcast: count of data must be >= 0, got -1"},
      {be.broadcast(x, 4, bad_dtype, 0), "broadcast: dtype must be one of"},
      {be.alltoall(x, x, f32, {1, 1}, {2, 1}),
       "alltoall: send_counts[0] (what rank 0 keeps for itself) must equal recv_counts[0] = 2, "
       "got 1"},
      {be.alltoall(x, x, f32, {1, 1, 1}, {1, 1}),
       "alltoall: send_counts must have one entry per rank (2), got 3"},
      {be.alltoall(x, x, f32, {1, 1}, {1, -1}), "alltoall: recv_counts[1] must be >= 0, got -1"},
      {be.alltoall(x, nullptr, f32, {1, 1}, {1, 1}), "alltoall: output must be non-null"},
      {be.alltoall(x, x, bad_dtype, {1, 1}, {1, 1}), "alltoall: dtype must be one of"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(c.status.code(), StatusCode::kInvalidArgument) << c.status.to_string();
    EXPECT_NE(c.status.message().find(c.want), std::string::npos) << c.status.message();
  }
  // Nothing reached rank 1.
  char c;
  ops::Request r = b[1]->channel().irecv(0, &c, 1);
  EXPECT_FALSE(r.done());
  b[0]->channel().send(1, "k", 1).ok();
  EXPECT_TRUE(b[1]->channel().wait(r).ok());
}

// Issue 15: an average is divided by the ranks before the postscale, so an integer result is
// exact (multiplying by 13 / 3.0 would give 116.99..., truncated to 116).
TEST(ChannelBackendTest, AverageDividesBeforeThePostscale) {
  auto b = make_backends(3);
  std::vector<std::vector<int32_t>> out(3, std::vector<int32_t>(2, -1));
  std::vector<int32_t> rs_out(3, -1);
  auto st = run(b, [&](Backend& be) -> Status {
    const Reduction avg{ReduceOp::kAverage, 1.0, 13.0};
    const int32_t in[3] = {9, 9, 9};
    KOLO_RETURN_IF_ERROR(be.allreduce(in, out[be.rank()].data(), 2, DataType::kInt32, avg));
    return be.reducescatter(in, &rs_out[be.rank()], DataType::kInt32, avg, {1, 1, 1});
  });
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(st[r].ok()) << st[r].to_string();
    EXPECT_EQ(out[r], (std::vector<int32_t>{117, 117}));
    EXPECT_EQ(rs_out[r], 117);
  }
}

TEST(ChannelBackendTest, PeerFailureIsReportedWithBackendName) {
  auto b = make_backends(2);
  static_cast<ops::ThreadChannel&>(b[1]->channel()).close();
  float x = 1;
  Status s = b[0]->allreduce(&x, &x, 1, DataType::kFloat32, {});
  EXPECT_EQ(s.code(), StatusCode::kPeerFailure) << s.to_string();
  EXPECT_NE(s.message().find("backend test"), std::string::npos) << s.message();
}

// The tuning comes from the job's knobs (what init() parsed), never from the environment.
TEST(ChannelBackendTest, TuningFromTheKnobs) {
  ::setenv("KOLO_RING_SEGMENT", "lots", 1);  // ignored: only init() reads the environment
  Result<KnobSet> knobs =
      KnobSet::read({{"KOLO_RING_THRESHOLD", "1KiB"}, {"KOLO_RING_SEGMENT", "4096"}});
  ::unsetenv("KOLO_RING_SEGMENT");
  ASSERT_TRUE(knobs.ok()) << knobs.status().to_string();
  ops::AllreduceTuning t = allreduce_tuning(*knobs);
  EXPECT_EQ(t.small_message_bytes, 1024u);
  EXPECT_EQ(t.segment_bytes, 4096u);
  // The merged pair's one rule: a threshold of 0 (always the ring) is fine, a segment of 0 not.
  knobs = KnobSet::read({{"KOLO_RING_THRESHOLD", "0"}});
  ASSERT_TRUE(knobs.ok()) << knobs.status().to_string();
  EXPECT_EQ(allreduce_tuning(*knobs).small_message_bytes, 0u);
  Result<KnobSet> zero = KnobSet::read({{"KOLO_RING_SEGMENT", "0"}});
  ASSERT_FALSE(zero.ok());
  EXPECT_EQ(zero.status().message().rfind("KOLO_RING_SEGMENT=0 is invalid", 0), 0u)
      << zero.status().message();
  EXPECT_EQ(KnobSet::read({{"KOLO_SEGMENT_BYTES", "4096"}}).status().message(),
            "KOLO_SEGMENT_BYTES was renamed KOLO_RING_SEGMENT: set KOLO_RING_SEGMENT=4096 instead");
  // Unset, they are their rows' defaults, which a ChannelBackend built without a tuning takes.
  auto b = make_backends(1);
  EXPECT_TRUE(b[0]->init_status().ok());
  EXPECT_EQ(b[0]->tuning().segment_bytes, KnobSet::defaults().size(KnobId::kRingSegment));
  EXPECT_EQ(b[0]->tuning().small_message_bytes, KnobSet::defaults().size(KnobId::kRingThreshold));
  // A zero segment from a hand-made tuning is refused by every collective, naming it.
  ChannelBackend zero_segment(
      "test", std::move(ops::make_thread_channels(1, std::chrono::seconds(20))[0]), {64, 0});
  EXPECT_EQ(zero_segment.init_status().message(),
            "backend test: the backend's tuning.segment_bytes must be > 0, got 0");
  float x = 1;
  EXPECT_EQ(zero_segment.allreduce(&x, &x, 1, DataType::kFloat32, {}).code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kolo
