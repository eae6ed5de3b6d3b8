// CUDA tensors through the coordinator: submission checks in every build; with a GPU,
// allreduce/allgather/broadcast of device tensors on in-process ranks against CPU results, and
// the trace of an operation on the nccl backend.
#include "coordinator/cuda_staging.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "coordinator/test_cluster.h"

#ifdef KOLO_HAVE_CUDA
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "backends/local_backend.h"
#include "backends/registry.h"
#endif

namespace kolo::coord {
namespace {

using testkit::Cluster;
using testkit::submit;

TensorView cuda_view(void* data, std::vector<int64_t> shape, int device = 0) {
  TensorView v;
  v.data = data;
  v.shape = std::move(shape);
  v.device = Device::cuda(device);
  return v;
}

TEST(CudaStagingTest, CudaViewIsRefusedWhenItCannotBeStaged) {
  float dummy[4] = {};
  if (!cuda_built()) {
    auto e = build_allreduce("x", cuda_view(dummy, {4}), cuda_view(dummy, {4}), {});
    ASSERT_FALSE(e.ok());
    EXPECT_EQ(e.status().code(), StatusCode::kUnsupported);
    EXPECT_EQ(e.status().message(),
              "allreduce input: tensor 'x' is on cuda:0 but this Kolo build has no CUDA support "
              "(configure with -DKOLO_WITH_CUDA=ON)");
    return;
  }
  // A CUDA build: an ordinal beyond the visible devices is named with the count.
  const int count = cuda_device_count();
  auto e = build_broadcast("y", cuda_view(dummy, {4}, count), {0}, 1);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(e.status().message(),
            "broadcast tensor: tensor 'y' is on cuda:" + std::to_string(count) +
                " but this process sees " + std::to_string(count) +
                " CUDA device(s) (valid ordinals: [0, " + std::to_string(count) + "))");
}

TEST(CudaStagingTest, CpuViewsAlwaysPass) {
  EXPECT_TRUE(check_device("allreduce input", "x", Device::cpu()).ok());
}

#ifdef KOLO_HAVE_CUDA

// Device memory for a test, freed at scope exit.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) {
    EXPECT_EQ(cudaMalloc(&data_, bytes), cudaSuccess);
    bytes_ = bytes;
  }
  ~DeviceBuffer() { cudaFree(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* data() const { return data_; }
  template <typename T>
  void upload(const std::vector<T>& v) {
    ASSERT_EQ(cudaMemcpy(data_, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  template <typename T>
  std::vector<T> download(size_t n) const {
    std::vector<T> v(n);
    EXPECT_EQ(cudaMemcpy(v.data(), data_, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

class CudaRuntimeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0)
      GTEST_SKIP() << "no CUDA device visible (cudaGetDeviceCount is 0)";
  }
};

std::vector<float> values(int rank, size_t n, float base) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = base + static_cast<float>(rank * 10 + i % 7);
  return v;
}

// Keeps `stream` busy for a while (tens of milliseconds of memsets), so that a copy that is
// not ordered after the work queued behind it would run first and see stale data.
void keep_busy(DeviceBuffer& big, size_t bytes, cudaStream_t stream) {
  for (int i = 0; i < 200; ++i)
    ASSERT_EQ(cudaMemsetAsync(big.data(), i, bytes, stream), cudaSuccess);
}

TEST_F(CudaRuntimeTest, StagingCopiesFollowTheLegacyStreamAndTheOutputsReadyEvent) {
  // The copy streams are non-blocking: without a ready event a copy must still follow the
  // legacy default stream (where the framework writes), and a result must not be written into
  // an output before that output's ready event.
  constexpr size_t kBig = size_t{64} << 20, kSmall = 4096;
  DeviceBuffer big(kBig), src(kSmall), dst(kSmall);
  ASSERT_EQ(cudaMemset(src.data(), 0, kSmall), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  CudaStaging staging;
  Result<void*> host = staging.host_buffer(CudaStaging::Slot::kInput, kSmall);
  ASSERT_TRUE(host.ok()) << host.status().to_string();
  keep_busy(big, kBig, cudaStreamLegacy);
  ASSERT_EQ(cudaMemsetAsync(src.data(), 7, kSmall, cudaStreamLegacy), cudaSuccess);
  TensorView in = cuda_view(src.data(), {static_cast<int64_t>(kSmall)});
  in.dtype = DataType::kUInt8;
  ASSERT_TRUE(staging.copy_to_host(*host, in, kSmall, "legacy").ok());
  ASSERT_TRUE(staging.synchronize().ok());
  const auto* got = static_cast<const unsigned char*>(*host);
  for (size_t i = 0; i < kSmall; i += 97) ASSERT_EQ(got[i], 7) << i;

  cudaStream_t producer;
  cudaEvent_t ready;
  ASSERT_EQ(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), cudaSuccess);
  keep_busy(big, kBig, producer);
  // The producer's last use of the output.
  ASSERT_EQ(cudaMemsetAsync(dst.data(), 0, kSmall, producer), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(ready, producer), cudaSuccess);
  std::memset(*host, 5, kSmall);
  TensorView out = cuda_view(dst.data(), {static_cast<int64_t>(kSmall)});
  out.dtype = DataType::kUInt8;
  out.ready_event = ready;
  ASSERT_TRUE(staging.copy_to_device(out, *host, kSmall, "out").ok());
  ASSERT_TRUE(staging.synchronize().ok());
  ASSERT_EQ(cudaStreamSynchronize(producer), cudaSuccess);
  std::vector<unsigned char> result = dst.download<unsigned char>(kSmall);
  for (size_t i = 0; i < kSmall; i += 97) ASSERT_EQ(result[i], 5) << i;
  cudaEventDestroy(ready);
  cudaStreamDestroy(producer);
}

// The same allreduces on CPU and CUDA tensors give the same results: one tensor alone,
// several fused, a group, and scale factors.
TEST_F(CudaRuntimeTest, AllreduceMatchesCpu) {
  Cluster c(2);
  c.each([&](int r) {
    const AllreduceOptions avg{.reduction = {ReduceOp::kAverage, 2.0, 0.5}};
    std::vector<std::vector<float>> cpu = {values(r, 5, 1), values(r, 1000, 2), values(r, 3, 3),
                                           values(r, 33, 4)};
    std::vector<std::unique_ptr<DeviceBuffer>> gpu;
    for (auto& v : cpu) {
      gpu.push_back(std::make_unique<DeviceBuffer>(v.size() * sizeof(float)));
      gpu.back()->upload(v);
    }
    // A ready event recorded after an asynchronous write on another stream: Kolo must order
    // its copy after it.
    cudaStream_t producer;
    cudaEvent_t ready;
    ASSERT_EQ(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), cudaSuccess);
    std::vector<float> late = values(r, 1000, 2);
    ASSERT_EQ(cudaMemcpyAsync(gpu[1]->data(), late.data(), late.size() * sizeof(float),
                              cudaMemcpyHostToDevice, producer),
              cudaSuccess);
    ASSERT_EQ(cudaEventRecord(ready, producer), cudaSuccess);

    std::vector<Handle> hs;
    auto sizes = [&](size_t i) {
      return std::vector<int64_t>{static_cast<int64_t>(cpu[i].size())};
    };
    for (int pass = 0; pass < 2; ++pass) {
      const bool on_gpu = pass == 1;
      auto view = [&](size_t i) {
        TensorView v =
            on_gpu ? cuda_view(gpu[i]->data(), sizes(i)) : view_of(cpu[i].data(), sizes(i));
        if (on_gpu && i == 1) v.ready_event = ready;
        return v;
      };
      std::string p = on_gpu ? "gpu." : "cpu.";
      hs.push_back(submit(c[r], build_allreduce(p + "single", view(0), view(0), avg)));
      hs.push_back(submit(c[r], build_allreduce(p + "big", view(1), view(1), {})));
      hs.push_back(submit(c[r], build_grouped_allreduce(p + "group", {view(2), view(3)},
                                                        {.reduction = {.op = ReduceOp::kMax}})));
    }
    for (auto& h : hs) ASSERT_TRUE(h.wait().ok()) << h.name() << ": " << h.wait().to_string();
    for (size_t i = 0; i < cpu.size(); ++i)
      EXPECT_EQ(gpu[i]->download<float>(cpu[i].size()), cpu[i]) << "tensor " << i;
    // Element 1 is 2 on rank 0 and 12 on rank 1: prescale 2, average, postscale 0.5.
    EXPECT_EQ(cpu[0][1], (2.0f + 12.0f) * 2.0f / 2 * 0.5f);
    cudaEventDestroy(ready);
    cudaStreamDestroy(producer);
  });
}

TEST_F(CudaRuntimeTest, AllgatherAndBroadcastMatchCpu) {
  Cluster c(2);
  c.each([&](int r) {
    // allgather: rank r has r+2 rows of 3.
    std::vector<float> in = values(r, 3 * (r + 2), 0);
    DeviceBuffer din(in.size() * sizeof(float));
    din.upload(in);
    const std::vector<int64_t> shape = {r + 2, 3};
    auto cpu_h = submit(c[r], build_allgather("ag.cpu", view_of(in.data(), shape), {}));
    auto host_out = submit(c[r], build_allgather("ag.gpu.host", cuda_view(din.data(), shape), {}));
    std::unique_ptr<DeviceBuffer> dout;
    AllgatherOptions to_device;
    to_device.allocator = [&](const std::vector<int64_t>& s, DataType dt) {
      dout = std::make_unique<DeviceBuffer>(s[0] * s[1] * dtype_size(dt));
      return dout->data();
    };
    auto dev_out =
        submit(c[r], build_allgather("ag.gpu.dev", cuda_view(din.data(), shape), to_device));
    // broadcast from rank 1.
    std::vector<float> b = values(r, 17, 5), bcpu = b;
    DeviceBuffer db(b.size() * sizeof(float));
    db.upload(b);
    auto bc_cpu = submit(c[r], build_broadcast("bc.cpu", view_of(bcpu.data(), {17}), {1}, 2));
    auto bc_gpu = submit(c[r], build_broadcast("bc.gpu", cuda_view(db.data(), {17}), {1}, 2));

    for (Handle* h : {&cpu_h, &host_out, &dev_out, &bc_cpu, &bc_gpu})
      ASSERT_TRUE(h->wait().ok()) << h->name() << ": " << h->wait().to_string();
    HostTensor expected = cpu_h.take_output();
    EXPECT_EQ(expected.shape, (std::vector<int64_t>{5, 3}));
    HostTensor got = host_out.take_output();
    EXPECT_EQ(got.shape, expected.shape);
    EXPECT_EQ(got.bytes, expected.bytes);
    EXPECT_EQ(dev_out.output_shape(), expected.shape);
    EXPECT_EQ(dev_out.output_data(), dout->data());
    std::vector<float> want(expected.data_as<float>(), expected.data_as<float>() + 15);
    EXPECT_EQ(dout->download<float>(15), want);
    EXPECT_EQ(db.download<float>(17), bcpu);
    EXPECT_EQ(bcpu, values(1, 17, 5));
  });
}

TEST_F(CudaRuntimeTest, ANcclOperationsSpansEndWhenTheGpuFinishedIt) {
  // A GPU operation's timeline spans used to end when it was queued, so a trace showed none of
  // its GPU time. Here the allreduce waits on the GPU behind busy work on the legacy stream
  // (it has no ready event): its NCCL_ALLREDUCE span must last most of that work.
  BackendContext one;  // rank 0 of 1: no store
  one.knobs = &KnobSet::defaults();
  one.connect_timeout = std::chrono::milliseconds(60000);
  one.op_timeout = std::chrono::milliseconds(60000);
  Result<std::unique_ptr<Backend>> nccl = create_backend("nccl", one);
  if (!nccl.ok()) GTEST_SKIP() << "no nccl backend here: " << nccl.status().to_string();
  auto rt = Runtime::create(testkit::test_config(), Topology{}, make_local_backend("local"),
                            make_local_backend("control"), std::move(*nccl));
  ASSERT_TRUE(rt.ok()) << rt.status().to_string();
  constexpr size_t kBig = size_t{64} << 20;
  DeviceBuffer big(kBig), t(4096 * sizeof(float));
  t.upload(std::vector<float>(4096, 1.0f));
  // How long the busy work alone keeps the GPU: the bound below is a quarter of it.
  cudaEvent_t e0, e1;
  ASSERT_EQ(cudaEventCreate(&e0), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&e1), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(e0, cudaStreamLegacy), cudaSuccess);
  for (int i = 0; i < 10; ++i) keep_busy(big, kBig, cudaStreamLegacy);
  ASSERT_EQ(cudaEventRecord(e1, cudaStreamLegacy), cudaSuccess);
  ASSERT_EQ(cudaEventSynchronize(e1), cudaSuccess);
  float busy_ms = 0;
  ASSERT_EQ(cudaEventElapsedTime(&busy_ms, e0, e1), cudaSuccess);
  const std::string trace =
      ::testing::TempDir() + "nccl_spans_" + std::to_string(::getpid()) + ".json";
  ASSERT_TRUE((*rt)->timeline().start(trace, 0).ok());
  for (int i = 0; i < 10; ++i) keep_busy(big, kBig, cudaStreamLegacy);
  TensorView v = cuda_view(t.data(), {4096});
  Handle h = submit(**rt, build_allreduce("t", v, v, {}));
  ASSERT_TRUE(h.wait().ok()) << h.wait().to_string();
  (*rt)->timeline().stop();
  std::ifstream in(trace);
  const nlohmann::json events = nlohmann::json::parse(in);
  std::remove(trace.c_str());
  double gpu_us = -1;
  for (const auto& e : events)
    if (e.at("ph") == "X" && e.at("name") == "NCCL_ALLREDUCE") gpu_us = e.at("dur").get<double>();
  ASSERT_GE(gpu_us, 0) << "no NCCL_ALLREDUCE span: " << events.dump();
  EXPECT_GE(gpu_us, busy_ms * 1000 / 4) << "busy work alone: " << busy_ms << " ms";
  EXPECT_EQ(t.download<float>(1)[0], 1.0f);  // one rank: the sum is the input
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
}

// Issue 32 (Note [Device spans per batch] in executor_device.cc): a fused batch of CUDA tensors
// on nccl records its NCCL_ALLREDUCE span once, with the batch's tensor count; each tensor keeps
// its ALLREDUCE span. Whether the three are fused depends on the cycle they land in, so the
// device spans' counts must add up to the three tensors, whatever the cut.
TEST_F(CudaRuntimeTest, AFusedNcclBatchHasOneDeviceSpanAndEveryTensorsOperation) {
  BackendContext one;  // rank 0 of 1: no store
  one.knobs = &KnobSet::defaults();
  one.connect_timeout = std::chrono::milliseconds(60000);
  one.op_timeout = std::chrono::milliseconds(60000);
  Result<std::unique_ptr<Backend>> nccl = create_backend("nccl", one);
  if (!nccl.ok()) GTEST_SKIP() << "no nccl backend here: " << nccl.status().to_string();
  auto rt = Runtime::create(testkit::test_config(), Topology{}, make_local_backend("local"),
                            make_local_backend("control"), std::move(*nccl));
  ASSERT_TRUE(rt.ok()) << rt.status().to_string();
  const std::string trace =
      ::testing::TempDir() + "nccl_batch_" + std::to_string(::getpid()) + ".json";
  ASSERT_TRUE((*rt)->timeline().start(trace, 0).ok());
  std::vector<std::unique_ptr<DeviceBuffer>> buffers;
  std::vector<Handle> handles;
  for (const char* name : {"a", "b", "c"}) {
    buffers.push_back(std::make_unique<DeviceBuffer>(1024 * sizeof(float)));
    buffers.back()->upload(std::vector<float>(1024, 2.0f));
    TensorView v = cuda_view(buffers.back()->data(), {1024});
    handles.push_back(submit(**rt, build_allreduce(name, v, v, {})));
  }
  for (Handle& h : handles) ASSERT_TRUE(h.wait().ok()) << h.wait().to_string();
  (*rt)->timeline().stop();
  std::ifstream in(trace);
  const nlohmann::json events = nlohmann::json::parse(in);
  std::remove(trace.c_str());
  int ops = 0, tensors = 0, device_spans = 0;
  for (const auto& e : events) {
    if (e.at("ph") != "X") continue;
    if (e.at("name") == "ALLREDUCE") {
      ++ops;
      EXPECT_EQ(e.at("args").at("status"), "OK") << e.dump();
    }
    if (e.at("name") == "NCCL_ALLREDUCE") {
      ++device_spans;
      tensors += e.at("args").at("tensors").get<int>();
    }
  }
  EXPECT_EQ(ops, 3) << events.dump();
  EXPECT_EQ(tensors, 3) << events.dump();
  EXPECT_LE(device_spans, 3);
  for (auto& b : buffers) EXPECT_EQ(b->download<float>(1)[0], 2.0f);  // one rank: the input
}

#endif  // KOLO_HAVE_CUDA

}  // namespace
}  // namespace kolo::coord
