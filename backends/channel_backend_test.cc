// ChannelBackend over thread channels: every collective end to end through the Backend
// interface, argument validation before sending, and the tuning variables.
#include "backends/channel_backend.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
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
        AllreduceOptions o;
        o.op = ReduceOp::kAverage;
        o.prescale = 2.0;
        o.postscale = 0.5;
        return be.allreduce(in[be.rank()].data(), out[be.rank()].data(), count, DataType::kFloat32,
                            o);
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
    KOLO_RETURN_IF_ERROR(be.allgather(in.data(), out.data(), DataType::kInt32, {{1, 0, 2}}));
    if (out != std::vector<int32_t>{0, 20, 20}) return Status::Internal("allgather result");
    // broadcast from root 2
    std::vector<int64_t> d(7, r == 2 ? 42 : 0);
    KOLO_RETURN_IF_ERROR(be.broadcast(d.data(), 7, DataType::kInt64, {2}));
    for (auto v : d)
      if (v != 42) return Status::Internal("broadcast result");
    // alltoall: one element to every rank, value r*10+j
    std::vector<int32_t> s = {r * 10, r * 10 + 1, r * 10 + 2}, g(3, -1);
    KOLO_RETURN_IF_ERROR(be.alltoall(s.data(), g.data(), DataType::kInt32, {{1, 1, 1}, {1, 1, 1}}));
    for (int j = 0; j < p; ++j)
      if (g[j] != j * 10 + r) return Status::Internal("alltoall result");
    // reducescatter sum, counts {2, 1, 0}
    std::vector<double> rs_in = {1, 2, 3}, rs_out(2, -1);
    ReducescatterOptions ro;
    ro.counts = {2, 1, 0};
    KOLO_RETURN_IF_ERROR(be.reducescatter(rs_in.data(), rs_out.data(), DataType::kFloat64, ro));
    if (r == 0 && (rs_out[0] != 3 || rs_out[1] != 6)) return Status::Internal("reducescatter r0");
    if (r == 1 && rs_out[0] != 9) return Status::Internal("reducescatter r1");
    return be.barrier();
  });
  for (auto& s : st) EXPECT_TRUE(s.ok()) << s.to_string();
}

TEST(ChannelBackendTest, InvalidArgumentsAreReportedBeforeSending) {
  auto b = make_backends(2);
  Backend& be = *b[0];
  float x[2] = {1, 2};
  Status s = be.allreduce(x, x, -3, DataType::kFloat32, {});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("-3"), std::string::npos) << s.message();
  s = be.broadcast(x, 2, DataType::kFloat32, {5});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  s = be.allgather(x, x, DataType::kFloat32, {{1}});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  s = be.allreduce(nullptr, x, 2, DataType::kFloat32, {});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  // Nothing reached rank 1.
  char c;
  ops::Request r = b[1]->channel().irecv(0, &c, 1);
  EXPECT_FALSE(r.done());
  b[0]->channel().send(1, "k", 1).ok();
  EXPECT_TRUE(b[1]->channel().wait(r).ok());
}

TEST(ChannelBackendTest, PeerFailureIsReportedWithBackendName) {
  auto b = make_backends(2);
  static_cast<ops::ThreadChannel&>(b[1]->channel()).close();
  float x = 1;
  Status s = b[0]->allreduce(&x, &x, 1, DataType::kFloat32, {});
  EXPECT_EQ(s.code(), StatusCode::kPeerFailure) << s.to_string();
  EXPECT_NE(s.message().find("backend test"), std::string::npos) << s.message();
}

TEST(ChannelBackendTest, TuningFromEnvironment) {
  ::setenv("KOLO_RING_THRESHOLD", "1KiB", 1);
  ::setenv("KOLO_RING_SEGMENT", "4096", 1);
  auto t = allreduce_tuning_from_env({});
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->small_message_bytes, 1024u);
  EXPECT_EQ(t->segment_bytes, 4096u);
  // The merged pair's one rule: a threshold of 0 (always the ring) is fine, a segment of 0 not.
  ::setenv("KOLO_RING_THRESHOLD", "0", 1);
  t = allreduce_tuning_from_env({});
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->small_message_bytes, 0u);

  ::setenv("KOLO_RING_SEGMENT", "lots", 1);
  auto b = make_backends(1);
  EXPECT_EQ(b[0]->init_status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(
      b[0]->init_status().message().rfind("backend test: KOLO_RING_SEGMENT=lots is invalid", 0), 0u)
      << b[0]->init_status().message();
  float x = 1;
  EXPECT_EQ(b[0]->allreduce(&x, &x, 1, DataType::kFloat32, {}).code(),
            StatusCode::kInvalidArgument);
  ::setenv("KOLO_RING_SEGMENT", "0", 1);
  EXPECT_FALSE(allreduce_tuning_from_env({}).ok());
  ::unsetenv("KOLO_RING_THRESHOLD");
  ::unsetenv("KOLO_RING_SEGMENT");
  ::setenv("KOLO_SEGMENT_BYTES", "4096", 1);
  EXPECT_EQ(allreduce_tuning_from_env({}).status().message(),
            "KOLO_SEGMENT_BYTES was renamed KOLO_RING_SEGMENT: set KOLO_RING_SEGMENT=4096 instead");
  ::unsetenv("KOLO_SEGMENT_BYTES");
  auto d = allreduce_tuning_from_env({});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->segment_bytes, ops::AllreduceTuning{}.segment_bytes);
}

TEST(ChannelBackendTest, RegistryDefaultsAreTheAlgorithmsDefaults) {
  Result<KnobSet> knobs = KnobSet::read({});
  ASSERT_TRUE(knobs.ok());
  EXPECT_EQ(knobs->size(KnobId::kRingThreshold), ops::AllreduceTuning{}.small_message_bytes);
  EXPECT_EQ(knobs->size(KnobId::kRingSegment), ops::AllreduceTuning{}.segment_bytes);
}

}  // namespace
}  // namespace kolo
