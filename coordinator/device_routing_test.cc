// The executor asks the data backend which devices it takes (Backend::supports) and passes
// those tensors unstaged. Without a GPU the "CUDA" tensors here are host memory labelled
// cuda:0, and the test backend takes them as host memory: a staging copy would fail (no CUDA
// device, or no CUDA in the build), so results are only right when nothing was staged.
#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common/thread_annotations.h"
#include "coordinator/test_cluster.h"

namespace kolo::coord {
namespace {

using testkit::Cluster;
using testkit::submit;
using testkit::test_config;

// A thread-channel backend that claims the device kinds it is given and records every buffer
// the executor hands it.
class RecordingBackend : public ChannelBackend {
 public:
  RecordingBackend(std::unique_ptr<ops::Channel> channel, std::vector<DeviceKind> kinds)
      : ChannelBackend("rec", std::move(channel)), kinds_(std::move(kinds)) {}

  bool supports(Device device) const override {
    return std::find(kinds_.begin(), kinds_.end(), device.kind) != kinds_.end();
  }

 protected:
  Status do_allreduce(const void* input, void* output, int64_t count, DataType dtype,
                      const Reduction& reduction) override {
    record("allreduce", input, output);
    return ChannelBackend::do_allreduce(input, output, count, dtype, reduction);
  }
  Status do_allgather(const void* input, void* output, DataType dtype,
                      const std::vector<int64_t>& counts) override {
    record("allgather", input, output);
    return ChannelBackend::do_allgather(input, output, dtype, counts);
  }
  Status do_broadcast(void* data, int64_t count, DataType dtype, int root) override {
    record("broadcast", data, data);
    return ChannelBackend::do_broadcast(data, count, dtype, root);
  }

 public:
  struct Call {
    std::string op;
    const void* input;
    const void* output;
  };
  std::vector<Call> calls() const {
    MutexLock lock(mu_);
    return calls_;
  }

 private:
  void record(std::string op, const void* input, const void* output) {
    MutexLock lock(mu_);
    calls_.push_back({std::move(op), input, output});
  }

  const std::vector<DeviceKind> kinds_;
  mutable Mutex mu_;
  std::vector<Call> calls_ KOLO_GUARDED_BY(mu_);
};

// A cluster whose data backends are RecordingBackends taking `kinds`; backends[r] is rank r's.
struct RecordingCluster {
  RecordingCluster(int size, std::vector<DeviceKind> kinds)
      : backends(size),
        cluster(size, test_config(), std::chrono::seconds(20), -1,
                [this, kinds, next = 0](std::unique_ptr<ops::Channel> channel) mutable {
                  auto b = std::make_unique<RecordingBackend>(std::move(channel), kinds);
                  backends[next++] = b.get();
                  return std::unique_ptr<Backend>(std::move(b));
                }) {}
  std::vector<RecordingBackend*> backends;  // owned by the cluster's runtimes
  Cluster cluster;
};

// Labels an entry's tensors as cuda:0 (their memory stays on the host).
std::unique_ptr<Entry> on_cuda(Result<std::unique_ptr<Entry>> built) {
  EXPECT_TRUE(built.ok()) << built.status().to_string();
  std::unique_ptr<Entry> e = std::move(*built);
  e->request.device = Device::cuda(0);
  for (auto& v : e->inputs) v.device = Device::cuda(0);
  for (auto& v : e->outputs) v.device = Device::cuda(0);
  return e;
}

TEST(DeviceRoutingTest, TensorsOnADeviceTheBackendTakesReachItUnstaged) {
  RecordingCluster rc(2, {DeviceKind::kCpu, DeviceKind::kCuda});
  Cluster& c = rc.cluster;
  c.each([&](int r) {
    // A grouped allreduce of two tensors: on the host it would be fused into one buffer.
    std::vector<float> a(3, r + 1.0f), b(5, 10.0f * (r + 1));
    auto group =
        on_cuda(build_grouped_allreduce("group", {view_of(a.data(), {3}), view_of(b.data(), {5})},
                                        {.reduction = {ReduceOp::kSum, 2.0, 0.5}}));
    std::vector<int32_t> g(2, r);
    auto gather = on_cuda(build_allgather("gather", view_of(g.data(), {2}), {}));
    std::vector<double> bc(4, r + 7.0);
    auto bcast = on_cuda(build_broadcast("bcast", view_of(bc.data(), {4}), {1}, 2));
    std::set<const void*> mine = {a.data(), b.data(), g.data(), bc.data()};

    Handle hg = c[r].submit(std::move(group));
    Handle ha = c[r].submit(std::move(gather));
    Handle hb = c[r].submit(std::move(bcast));
    ASSERT_TRUE(hg.wait().ok()) << hg.wait().to_string();
    ASSERT_TRUE(ha.wait().ok()) << ha.wait().to_string();
    ASSERT_TRUE(hb.wait().ok()) << hb.wait().to_string();
    // (1 + 2) * 2 * 0.5 and (10 + 20) * 2 * 0.5: prescale and postscale applied by the backend.
    EXPECT_EQ(a, std::vector<float>(3, 3.0f));
    EXPECT_EQ(b, std::vector<float>(5, 30.0f));
    HostTensor gathered = ha.take_output();
    EXPECT_EQ(std::vector<int32_t>(gathered.data_as<int32_t>(), gathered.data_as<int32_t>() + 4),
              (std::vector<int32_t>{0, 0, 1, 1}));
    EXPECT_EQ(bc, std::vector<double>(4, 8.0));

    // One call per grouped tensor (in place), one allgather, one broadcast, each on the
    // caller's buffer; the allgather's output is the HostTensor Kolo allocated (no allocator).
    std::multiset<std::string> ops;
    std::set<const void*> reduced;
    for (const auto& call : rc.backends[r]->calls()) {
      ops.insert(call.op);
      EXPECT_TRUE(mine.count(call.input)) << call.op << " got a staged input";
      if (call.op == "allreduce") {
        EXPECT_EQ(call.output, call.input);
        reduced.insert(call.input);
      }
      if (call.op == "broadcast") {
        EXPECT_EQ(call.input, bc.data());
      }
      if (call.op == "allgather") {
        EXPECT_EQ(call.input, g.data());
      }
    }
    EXPECT_EQ(ops,
              (std::multiset<std::string>{"allgather", "allreduce", "allreduce", "broadcast"}));
    EXPECT_EQ(reduced, (std::set<const void*>{a.data(), b.data()}));
  });
}

TEST(DeviceRoutingTest, HostTensorsOnABackendThatTakesNoHostMemoryFailOnEveryRank) {
  RecordingCluster rc(2, {DeviceKind::kCuda});
  Cluster& c = rc.cluster;
  c.each([&](int r) {
    std::vector<float> v(4, 1.0f);
    Status st = testkit::allreduce(c[r], "host", v).wait();
    EXPECT_EQ(st.code(), StatusCode::kUnsupported);
    EXPECT_EQ(st.message(),
              "allreduce 'host': backend rec does not take cpu tensors, and they cannot be "
              "staged: the executor stages only CUDA tensors, through host memory, for a "
              "backend that takes it");
    std::vector<int32_t> g(2, r);
    Status gathered = submit(c[r], build_allgather("gather", view_of(g.data(), {2}), {})).wait();
    EXPECT_EQ(gathered.code(), StatusCode::kUnsupported) << gathered.to_string();
    // No rank called the backend, so the ranks are still in step: a barrier goes through.
    EXPECT_TRUE(submit(c[r], build_barrier("bar")).wait().ok());
    EXPECT_TRUE(rc.backends[r]->calls().empty());
    EXPECT_EQ(v, std::vector<float>(4, 1.0f));
  });
}

TEST(DeviceRoutingTest, AJoinedRankCannotStandInForADeviceTensor) {
  RecordingCluster rc(2, {DeviceKind::kCpu, DeviceKind::kCuda});
  Cluster& c = rc.cluster;
  c.each([&](int r) {
    if (r == 1) {
      EXPECT_TRUE(submit(c[r], build_join()).wait().ok());
      return;
    }
    std::vector<float> v(4, 1.0f);
    auto e = on_cuda(build_allreduce("dev", view_of(v.data(), {4}), view_of(v.data(), {4}), {}));
    Status st = c[r].submit(std::move(e)).wait();
    EXPECT_EQ(st.code(), StatusCode::kUnsupported);
    EXPECT_EQ(st.message(),
              "allreduce 'dev': backend rec takes cuda:0 tensors directly, and a rank that "
              "joined has no device buffer to contribute (joined ranks: 1)");
    EXPECT_TRUE(submit(c[r], build_join()).wait().ok());
  });
  EXPECT_TRUE(rc.backends[0]->calls().empty());
  EXPECT_TRUE(rc.backends[1]->calls().empty());
}

}  // namespace
}  // namespace kolo::coord
