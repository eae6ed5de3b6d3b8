// The nccl backend: selection (KOLO_GPU_OPERATIONS) and the factory's refusals run anywhere;
// the collectives run on a one-rank communicator on one GPU and skip without one.
#include "backends/nccl/nccl_backend.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <thread>
#include <type_traits>
#include <vector>

#include "backends/nccl/nccl_errors.h"
#include "backends/nccl/nccl_kernels.h"
#include "backends/registry.h"
#include "ops/reduce.h"
#include "rendezvous/memory_store.h"

namespace kolo {
namespace {

// NCCL reads its parameters once per process, at the first communicator: this binary's
// communicators check that every buffer is device memory (ACallNcclRefusesAbortsTheCommunicator
// relies on it; the other tests pass device buffers only).
const int kNcclChecksPointers = setenv("NCCL_CHECK_POINTERS", "1", /*overwrite=*/1);

int visible_gpus() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

#define KOLO_REQUIRE_GPU()                                                                  \
  if (visible_gpus() == 0)                                                                  \
  GTEST_SKIP() << "no CUDA device visible to this process: the one-rank NCCL communicator " \
                  "needs a GPU (scripts/gpu-check.sh runs these on a GPU machine)"

BackendContext one_rank() {
  BackendContext ctx;  // rank 0 of 1: no store needed
  ctx.knobs = &KnobSet::defaults();
  ctx.connect_timeout = std::chrono::milliseconds(20000);
  ctx.op_timeout = std::chrono::milliseconds(20000);
  return ctx;
}

TEST(NcclSelectionTest, DefaultIsNcclExactlyWhenAGpuIsVisible) {
  Result<std::string> none = gpu_backend_choice("", 0);
  ASSERT_TRUE(none.ok()) << none.status().to_string();
  EXPECT_EQ(*none, "");  // staged through host memory to the CPU backend
  Result<std::string> one = gpu_backend_choice("", 1);
  ASSERT_TRUE(one.ok()) << one.status().to_string();
  EXPECT_EQ(*one, "nccl");
  Result<std::string> eight = gpu_backend_choice("", 8);
  EXPECT_EQ(eight.value(), "nccl");
  // Four ranks on a host with two GPUs: NCCL would refuse, so the default stages instead.
  EXPECT_EQ(gpu_backend_choice("", 2, 4).value(), "");
  EXPECT_EQ(gpu_backend_choice("", 4, 4).value(), "nccl");
}

TEST(NcclSelectionTest, AnExplicitChoiceIsCheckedAgainstTheBuildAndTheGpus) {
  EXPECT_EQ(gpu_backend_choice("tcp", 0).value(), "tcp");
  EXPECT_EQ(gpu_backend_choice("tcp", 2).value(), "tcp");  // staged even with GPUs
  EXPECT_EQ(gpu_backend_choice("nccl", 1).value(), "nccl");
  Result<std::string> no_gpu = gpu_backend_choice("nccl", 0);
  ASSERT_FALSE(no_gpu.ok());
  EXPECT_EQ(no_gpu.status().to_string(),
            "InvalidArgument: KOLO_GPU_OPERATIONS=nccl: this process sees no GPU "
            "(CUDA_VISIBLE_DEVICES, driver), and backend nccl takes CUDA tensors only");
  Result<std::string> unknown = gpu_backend_choice("gloo", 1);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(unknown.status().message().rfind("KOLO_GPU_OPERATIONS=gloo: unknown backend 'gloo'; "
                                             "this build has: ",
                                             0),
            0u)
      << unknown.status().to_string();
}

TEST(NcclSelectionTest, OneGpuVisiblePerProcessIsThatProcesssGpu) {
  // SLURM --gpus-per-task=1, Kubernetes: CUDA_VISIBLE_DEVICES gives each rank one GPU, seen as
  // cuda:0, while the host runs several ranks.
  EXPECT_EQ(gpu_of_local_rank(0, 4, 1).value(), 0);
  EXPECT_EQ(gpu_of_local_rank(3, 4, 1).value(), 0);
  EXPECT_EQ(gpu_of_local_rank(3, 4, 4).value(), 3);  // all GPUs visible: the local rank's
  EXPECT_EQ(gpu_of_local_rank(1, 2, 8).value(), 1);
  Result<int> crowded = gpu_of_local_rank(2, 4, 2);
  ASSERT_FALSE(crowded.ok());
  EXPECT_EQ(crowded.status().to_string(),
            "InvalidArgument: 4 ranks run on this host but it has 2 visible GPU(s); NCCL needs "
            "one GPU per rank");
  EXPECT_EQ(gpu_of_local_rank(0, 1, 0).status().code(), StatusCode::kUnsupported);
  // The default takes nccl with one GPU per process, and stages when the ranks would share it.
  EXPECT_EQ(gpu_backend_choice("", 1, 4, /*gpu_per_process=*/true).value(), "nccl");
  EXPECT_EQ(gpu_backend_choice("", 1, 4, /*gpu_per_process=*/false).value(), "");
  EXPECT_EQ(gpu_backend_choice("", 2, 4, /*gpu_per_process=*/true).value(), "");
  EXPECT_EQ(gpu_backend_choice("nccl", 1, 4).value(), "nccl");  // asked for: NCCL decides
}

TEST(NcclRegistryTest, TheEntryTakesCudaBuffersOnly) {
  Result<const BackendEntry*> entry = find_backend("nccl");
  ASSERT_TRUE(entry.ok()) << entry.status().to_string();
  EXPECT_TRUE((*entry)->handles(Device::cuda(0)));
  EXPECT_FALSE((*entry)->handles(Device::cpu()));
  EXPECT_EQ((*entry)->launcher.detect, nullptr);
  EXPECT_NE(default_cpu_backend(World{}), "nccl");  // never the CPU default
}

TEST(NcclFactoryTest, WithoutAGpuItIsUnsupported) {
  if (visible_gpus() > 0) GTEST_SKIP() << "a GPU is visible: this test is for machines without";
  Result<std::unique_ptr<Backend>> b = create_backend("nccl", one_rank());
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().to_string(),
            "Unsupported: nccl: this process sees no CUDA device (CUDA_VISIBLE_DEVICES, "
            "driver); NCCL needs one GPU per rank");
}

TEST(NcclFactoryTest, MoreRanksOnAHostThanGpusIsRefused) {
  KOLO_REQUIRE_GPU();
  if (visible_gpus() == 1)
    GTEST_SKIP() << "one visible GPU is this process's own (gpu_of_local_rank): the refusal "
                    "needs two or more";
  BackendContext ctx = one_rank();
  ctx.local_size = visible_gpus() + 1;
  Result<std::unique_ptr<Backend>> b = create_backend("nccl", ctx);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(b.status().message().find("NCCL needs one GPU per rank"), std::string::npos);
}

// Device memory holding `values` as T, freed at scope exit.
template <typename T>
struct DeviceArray {
  explicit DeviceArray(const std::vector<T>& values) : n(values.size()) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&data), std::max<size_t>(n, 1) * sizeof(T)),
              cudaSuccess);
    EXPECT_EQ(cudaMemcpy(data, values.data(), n * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceArray() { cudaFree(data); }
  std::vector<T> get() const {
    std::vector<T> out(n);
    EXPECT_EQ(cudaMemcpy(out.data(), data, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  }
  T* data = nullptr;
  size_t n;
};

class NcclOneRankTest : public ::testing::Test {
 protected:
  void SetUp() override {
    KOLO_REQUIRE_GPU();
    Result<std::unique_ptr<Backend>> b = create_backend("nccl", one_rank());
    ASSERT_TRUE(b.ok()) << b.status().to_string();
    backend_ = std::move(*b);
    device_ = dynamic_cast<DeviceBackend*>(backend_.get());
    ASSERT_NE(device_, nullptr);
    EXPECT_EQ(backend_->name(), "nccl");
    EXPECT_EQ(backend_->size(), 1);
  }
  std::unique_ptr<Backend> backend_;
  DeviceBackend* device_ = nullptr;
};

void ignore_event(const std::shared_ptr<void>&) {}

// Runs an operation's fence and waits (bounded) for its done; returns done's status.
Status fence_and_wait(DeviceBackend& device, const std::string& what,
                      std::shared_ptr<void>* event = nullptr) {
  auto result = std::make_shared<Status>(Status::Internal("done never ran"));
  auto calls = std::make_shared<std::atomic<int>>(0);
  const Status fenced = device.fence(
      what,
      [&](std::shared_ptr<void> e) {
        if (event) *event = std::move(e);
      },
      [result, calls](const Status& st) {
        *result = st;
        calls->fetch_add(1);
      });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (calls->load() == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(calls->load(), 1);
  if (!fenced.ok()) {
    EXPECT_EQ(fenced.to_string(), result->to_string());  // fence told what done got
  }
  return *result;
}

std::vector<float> iota(size_t n, float from = 1) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = from + static_cast<float>(i);
  return v;
}

TEST_F(NcclOneRankTest, AllreduceEveryOpWithPreAndPostScale) {
  const std::vector<float> x = iota(1000);
  for (ReduceOp op :
       {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
    DeviceArray<float> in(x), out(std::vector<float>(x.size(), -1));
    // One rank: every op is the identity, so the result is x * prescale * postscale.
    ASSERT_TRUE(
        backend_->allreduce(in.data, out.data, 1000, DataType::kFloat32, {op, 4.0, 0.5}).ok());
    std::vector<float> got = out.get();
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(got[i], 2 * x[i]) << reduce_op_name(op) << i;
    EXPECT_EQ(in.get(), x);  // the input is untouched out of place
  }
  DeviceArray<float> inplace(x);
  ASSERT_TRUE(backend_
                  ->allreduce(inplace.data, inplace.data, 1000, DataType::kFloat32,
                              {ReduceOp::kSum, 1.0, 3.0})
                  .ok());
  std::vector<float> got = inplace.get();
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(got[i], 3 * x[i]);
}

TEST_F(NcclOneRankTest, HalfAndBfloat16AreNative) {
  std::vector<__half> h(64);
  std::vector<__nv_bfloat16> b(64);
  for (int i = 0; i < 64; ++i) {
    h[i] = __float2half(static_cast<float>(i));
    b[i] = __float2bfloat16(static_cast<float>(i));
  }
  DeviceArray<__half> dh(h);
  DeviceArray<__nv_bfloat16> db(b);
  ASSERT_TRUE(
      backend_->allreduce(dh.data, dh.data, 64, DataType::kFloat16, {ReduceOp::kSum, 1.0, 2.0})
          .ok());
  ASSERT_TRUE(
      backend_->allreduce(db.data, db.data, 64, DataType::kBFloat16, {ReduceOp::kAverage, 2.0, 1.0})
          .ok());
  std::vector<__half> gh = dh.get();
  std::vector<__nv_bfloat16> gb = db.get();
  for (int i = 0; i < 64; ++i) {
    ASSERT_EQ(__half2float(gh[i]), 2.0f * i) << i;
    ASSERT_EQ(__bfloat162float(gb[i]), 2.0f * i) << i;
  }
}

TEST_F(NcclOneRankTest, AllgatherBroadcastAlltoallReducescatterBarrier) {
  const std::vector<float> x = iota(256);
  DeviceArray<float> in(x), out(std::vector<float>(256, 0));
  ASSERT_TRUE(backend_->allgather(in.data, out.data, DataType::kFloat32, {256}).ok());
  EXPECT_EQ(out.get(), x);
  DeviceArray<float> b(x);
  ASSERT_TRUE(backend_->broadcast(b.data, 256, DataType::kFloat32, 0).ok());
  EXPECT_EQ(b.get(), x);
  DeviceArray<float> a2a(std::vector<float>(256, 0));
  ASSERT_TRUE(backend_->alltoall(in.data, a2a.data, DataType::kFloat32, {256}, {256}).ok());
  EXPECT_EQ(a2a.get(), x);
  DeviceArray<float> rs(std::vector<float>(256, 0));
  ASSERT_TRUE(
      backend_
          ->reducescatter(in.data, rs.data, DataType::kFloat32, {ReduceOp::kSum, 2.0, 1.0}, {256})
          .ok());
  std::vector<float> got = rs.get();
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(got[i], 2 * x[i]);
  EXPECT_TRUE(backend_->barrier().ok());
  // Zero elements are valid everywhere.
  EXPECT_TRUE(backend_->allreduce(nullptr, nullptr, 0, DataType::kFloat32, {}).ok());
  EXPECT_TRUE(backend_->allgather(nullptr, nullptr, DataType::kFloat32, {0}).ok());
}

// Note [Empty collectives] (nccl_plan.h): nothing to move is OK with no NCCL call. This binary
// sets NCCL_CHECK_POINTERS=1, so a null pointer that reached NCCL would be refused and abort the
// communicator: failure() staying OK and the real allreduce after show that none did.
TEST_F(NcclOneRankTest, EmptyTensorsCompleteWithoutNccl) {
  const Reduction sum{ReduceOp::kSum, 1.0, 1.0};
  auto empties = [&](const std::string& where) {
    EXPECT_TRUE(backend_->allreduce(nullptr, nullptr, 0, DataType::kFloat32, sum).ok()) << where;
    EXPECT_TRUE(backend_->allgather(nullptr, nullptr, DataType::kFloat32, {0}).ok()) << where;
    EXPECT_TRUE(backend_->broadcast(nullptr, 0, DataType::kFloat32, 0).ok()) << where;
    EXPECT_TRUE(backend_->alltoall(nullptr, nullptr, DataType::kFloat32, {0}, {0}).ok()) << where;
    EXPECT_TRUE(
        backend_
            ->reducescatter(nullptr, nullptr, DataType::kFloat32, {ReduceOp::kSum, 2.0, 1.0}, {0})
            .ok())
        << where;
    // A fused batch of empty tensors only (the device fusion buffer's path) and of one.
    EXPECT_TRUE(backend_
                    ->allreduce_pieces({{nullptr, nullptr, 0}, {nullptr, nullptr, 0}},
                                       DataType::kFloat32, sum)
                    .ok())
        << where;
    EXPECT_TRUE(backend_->allreduce_pieces({{nullptr, nullptr, 0}}, DataType::kFloat32, sum).ok())
        << where;
  };
  empties("blocking");
  // Inside an operation (wait_ready on an empty tensor passes null, as the executor does).
  ASSERT_TRUE(device_->wait_ready(Device::cuda(0), nullptr, nullptr, "allreduce 'e'").ok());
  empties("in an operation");
  EXPECT_TRUE(fence_and_wait(*device_, "allreduce 'e'").ok());
  ASSERT_TRUE(device_->failure().ok()) << device_->failure().to_string();
  // Empty pieces (null pointers) between full ones: only the full ones move, through the
  // fusion buffer when there is one.
  const std::vector<float> x = iota(1000);
  DeviceArray<float> a(x), b(x), out_b(std::vector<float>(x.size(), -1));
  const std::vector<AllreducePiece> pieces = {{nullptr, nullptr, 0},
                                              {a.data, a.data, 1000},
                                              {nullptr, nullptr, 0},
                                              {b.data, out_b.data, 1000},
                                              {nullptr, nullptr, 0}};
  ASSERT_TRUE(
      backend_->allreduce_pieces(pieces, DataType::kFloat32, {ReduceOp::kSum, 1.0, 3.0}).ok());
  std::vector<float> got_a = a.get(), got_b = out_b.get();
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(got_a[i], 3 * x[i]) << i;
    ASSERT_EQ(got_b[i], 3 * x[i]) << i;
  }
  EXPECT_EQ(b.get(), x);  // out of place: the input is untouched
  ASSERT_TRUE(device_->failure().ok()) << device_->failure().to_string();
}

// Two ranks, one GPU each (threads of this process sharing a MemoryStore), where some ranks'
// blocks are empty and others' are not: NCCL gets the stand-in for the empty buffers (Note
// [Empty collectives]), never null, and the others' data moves exactly. Skips below 2 GPUs.
TEST(NcclTwoRankTest, EmptyBlocksOfOneRankBesideTheOthersData) {
  if (visible_gpus() < 2)
    GTEST_SKIP() << "needs two visible GPUs (one per rank; NCCL refuses two ranks on one)";
  MemoryStore store;
  std::vector<std::unique_ptr<Backend>> backends(2);
  std::vector<std::thread> connect;
  for (int r = 0; r < 2; ++r)
    connect.emplace_back([&, r] {
      BackendContext ctx = one_rank();
      ctx.rank = ctx.local_rank = r;
      ctx.size = ctx.local_size = 2;
      ctx.store = &store;
      ctx.store_prefix = "empty-blocks";
      Result<std::unique_ptr<Backend>> b = create_backend("nccl", ctx);
      EXPECT_TRUE(b.ok()) << b.status().to_string();
      if (b.ok()) backends[r] = std::move(*b);
    });
  for (auto& t : connect) t.join();
  ASSERT_TRUE(backends[0] && backends[1]);
  // Each rank on its own thread, its own GPU current (the collectives are blocking).
  auto on_both = [&](const std::function<void(int, Backend&)>& f) {
    std::vector<std::thread> ranks;
    for (int r = 0; r < 2; ++r)
      ranks.emplace_back([&, r] {
        ASSERT_EQ(cudaSetDevice(r), cudaSuccess);
        f(r, *backends[r]);
      });
    for (auto& t : ranks) t.join();
  };
  on_both([](int r, Backend& b) {
    // allgather: rank 0 contributes nothing (null input), rank 1 four elements.
    DeviceArray<float> in(r == 1 ? iota(4) : std::vector<float>{});
    DeviceArray<float> out(std::vector<float>(4, -1));
    ASSERT_TRUE(b.allgather(r == 1 ? in.data : nullptr, out.data, DataType::kFloat32, {0, 4}).ok());
    EXPECT_EQ(out.get(), iota(4)) << "rank " << r;
    // alltoall: rank 0 sends 3 to rank 1 and receives nothing (null output).
    DeviceArray<float> send(r == 0 ? iota(3, 10) : std::vector<float>{});
    DeviceArray<float> recv(std::vector<float>(3, -1));
    const std::vector<int64_t> sc =
        r == 0 ? std::vector<int64_t>{0, 3} : std::vector<int64_t>{0, 0};
    const std::vector<int64_t> rc =
        r == 0 ? std::vector<int64_t>{0, 0} : std::vector<int64_t>{3, 0};
    ASSERT_TRUE(b.alltoall(r == 0 ? send.data : nullptr, r == 1 ? recv.data : nullptr,
                           DataType::kFloat32, sc, rc)
                    .ok());
    if (r == 1) EXPECT_EQ(recv.get(), iota(3, 10));
    // reducescatter: rank 0's block is empty (null output), rank 1's is the sum of 5.
    DeviceArray<float> rs_in(iota(5)), rs_out(std::vector<float>(5, -1));
    ASSERT_TRUE(b.reducescatter(rs_in.data, r == 1 ? rs_out.data : nullptr, DataType::kFloat32,
                                {ReduceOp::kSum, 1.0, 1.0}, {0, 5})
                    .ok());
    if (r == 1) {
      std::vector<float> want = iota(5);
      for (float& v : want) v *= 2;
      EXPECT_EQ(rs_out.get(), want);
    }
    EXPECT_TRUE(dynamic_cast<DeviceBackend&>(b).failure().ok());
  });
  // Shut down together: a communicator's finalize may wait for its peer's.
  on_both([&](int r, Backend&) { backends[r].reset(); });
}

TEST_F(NcclOneRankTest, AsyncProtocolWaitsForTheReadyEventAndCompletesThroughTheFence) {
  const std::vector<float> x = iota(1 << 20);
  DeviceArray<float> t(std::vector<float>(x.size(), 0));
  cudaStream_t producer;
  ASSERT_EQ(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking), cudaSuccess);
  cudaEvent_t ready;
  ASSERT_EQ(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), cudaSuccess);
  // The producer writes on its own stream; only the ready event orders the allreduce after it.
  ASSERT_EQ(
      cudaMemcpyAsync(t.data, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice, producer),
      cudaSuccess);
  ASSERT_EQ(cudaEventRecord(ready, producer), cudaSuccess);
  ASSERT_TRUE(device_->wait_ready(Device::cuda(0), t.data, ready, "allreduce 't'").ok());
  ASSERT_TRUE(backend_
                  ->allreduce(t.data, t.data, static_cast<int64_t>(x.size()), DataType::kFloat32,
                              {ReduceOp::kSum, 1.0, 2.0})
                  .ok());
  std::atomic<int> calls{0};
  Status result = Status::Internal("not called");
  std::shared_ptr<void> event;
  ASSERT_TRUE(device_
                  ->fence(
                      "allreduce 't'", [&](std::shared_ptr<void> e) { event = std::move(e); },
                      [&](const Status& st) {
                        result = st;
                        calls.fetch_add(1);
                      })
                  .ok());
  ASSERT_NE(event, nullptr);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (calls.load() == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_EQ(calls.load(), 1);
  EXPECT_TRUE(result.ok()) << result.to_string();
  EXPECT_EQ(cudaEventQuery(static_cast<cudaEvent_t>(event.get())), cudaSuccess);
  std::vector<float> got = t.get();
  for (size_t i = 0; i < x.size(); i += 4099) ASSERT_EQ(got[i], 2 * x[i]) << i;
  cudaEventDestroy(ready);
  cudaStreamDestroy(producer);
}

TEST_F(NcclOneRankTest, AFusedBatchIsOneGroupWithItsPostScalesAfterTheReduction) {
  // Three tensors of one operation, recorded into one NCCL group: each postscale kernel must
  // run after the group's allreduce (queued before it, the out-of-place result would be the
  // unscaled input), each prescale before it.
  const std::vector<float> x = iota(4096);
  DeviceArray<float> a(x), b(x), c(x), out_c(std::vector<float>(x.size(), -1));
  for (const DeviceArray<float>* t : {&a, &b, &c})
    ASSERT_TRUE(device_->wait_ready(Device::cuda(0), t->data, nullptr, "allreduce 'abc'").ok());
  const auto n = static_cast<int64_t>(x.size());
  ASSERT_TRUE(
      backend_->allreduce(a.data, a.data, n, DataType::kFloat32, {ReduceOp::kSum, 1.0, 2.0}).ok());
  ASSERT_TRUE(
      backend_->allreduce(b.data, b.data, n, DataType::kFloat32, {ReduceOp::kSum, 3.0, 1.0}).ok());
  ASSERT_TRUE(
      backend_->allreduce(c.data, out_c.data, n, DataType::kFloat32, {ReduceOp::kAverage, 1.0, 0.5})
          .ok());
  std::shared_ptr<void> event;
  Status st = fence_and_wait(*device_, "allreduce 'a' and 2 more", &event);
  ASSERT_TRUE(st.ok()) << st.to_string();
  ASSERT_NE(event, nullptr);
  const std::vector<float> ga = a.get(), gb = b.get(), gc = out_c.get();
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(ga[i], 2 * x[i]) << i;
    ASSERT_EQ(gb[i], 3 * x[i]) << i;
    ASSERT_EQ(gc[i], 0.5f * x[i]) << i;
  }
  EXPECT_EQ(c.get(), x);
}

// The device fusion buffer (allreduce_pieces) for one element type T (float or __half):
// tensors of odd counts (float16 ones of odd byte sizes: padded to 16 bytes in the buffer, the
// copies' tails go byte by byte), empty ones, in place and out of place, more than one
// batched-copy launch of them, scaled; inside an operation (copy out after the group) and
// outside one (blocking). Values are multiples of 1/4 below 128: exact in float16, as is twice
// them, the expected result.
template <typename T>
void check_allreduce_pieces(Backend& backend, DeviceBackend& device, DataType dtype) {
  auto to_t = [](float v) {
    if constexpr (std::is_same_v<T, __half>)
      return __float2half(v);
    else
      return v;
  };
  auto to_float = [](T v) {
    if constexpr (std::is_same_v<T, __half>)
      return __half2float(v);
    else
      return v;
  };
  for (bool in_op : {true, false}) {
    std::vector<std::unique_ptr<DeviceArray<T>>> inputs, outputs;
    std::vector<AllreducePiece> pieces;
    std::vector<std::vector<float>> values;
    for (int k = 0; k < 2 * nccl::kBatchedCopyMax + 3; ++k) {
      const size_t n = static_cast<size_t>(k % 7 == 0 ? 0 : (k * 37) % 1001 + 1);
      std::vector<float> v(n);
      std::vector<T> t(n);
      for (size_t i = 0; i < n; ++i) {
        v[i] = static_cast<float>((i * 7 + static_cast<size_t>(k)) % 509) / 4;
        t[i] = to_t(v[i]);
      }
      values.push_back(v);
      inputs.push_back(std::make_unique<DeviceArray<T>>(t));
      const bool in_place = k % 2 == 0;
      outputs.push_back(in_place ? nullptr
                                 : std::make_unique<DeviceArray<T>>(std::vector<T>(n, to_t(-1))));
      pieces.push_back({inputs.back()->data, in_place ? inputs.back()->data : outputs.back()->data,
                        static_cast<int64_t>(n)});
      if (in_op) {
        ASSERT_TRUE(device.wait_ready(Device::cuda(0), inputs.back()->data, nullptr, "fused").ok());
      }
    }
    ASSERT_TRUE(backend.allreduce_pieces(pieces, dtype, {ReduceOp::kAverage, 4.0, 0.5}).ok());
    if (in_op) {
      Status st = fence_and_wait(device, "fused");
      ASSERT_TRUE(st.ok()) << st.to_string();
    }
    for (size_t k = 0; k < pieces.size(); ++k) {
      const std::vector<T> got = (outputs[k] ? outputs[k] : inputs[k])->get();
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_EQ(to_float(got[i]), 2 * values[k][i])
            << dtype_name(dtype) << " in_op " << in_op << " piece " << k << " [" << i << "]";
      if (outputs[k]) {  // out of place: the input is untouched
        const std::vector<T> in = inputs[k]->get();
        for (size_t i = 0; i < in.size(); ++i) ASSERT_EQ(to_float(in[i]), values[k][i]);
      }
    }
  }
}

TEST_F(NcclOneRankTest, AllreducePiecesFusesOnTheDeviceAndCopiesOutAfterTheReduction) {
  // A one-rank job: the pools it agrees on are its own GPU's.
  int pools = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, 0), cudaSuccess);
  ASSERT_EQ(backend_->has_allreduce_pieces(), pools != 0);
  if (!pools) GTEST_SKIP() << "this GPU has no memory pools: the executor calls per tensor";
  check_allreduce_pieces<float>(*backend_, *device_, DataType::kFloat32);
  check_allreduce_pieces<__half>(*backend_, *device_, DataType::kFloat16);
}

TEST_F(NcclOneRankTest, AnOpWhoseEventTheCallerDropsStillCompletes) {
  // The executor drops the event when no handle holds it (a batch with no entry on this rank):
  // the watchdog's query must keep it alive, or it queries a destroyed event and aborts.
  DeviceArray<float> t(iota(1 << 16));
  ASSERT_TRUE(device_->wait_ready(Device::cuda(0), t.data, nullptr, "allreduce 't'").ok());
  ASSERT_TRUE(backend_->allreduce(t.data, t.data, 1 << 16, DataType::kFloat32, {}).ok());
  Status st = fence_and_wait(*device_, "allreduce 't'");  // the event is dropped at once
  EXPECT_TRUE(st.ok()) << st.to_string();
  // The communicator is alive: the next operation works.
  DeviceArray<float> u(iota(8));
  EXPECT_TRUE(backend_->allreduce(u.data, u.data, 8, DataType::kFloat32, {}).ok());
}

TEST_F(NcclOneRankTest, WithoutAReadyEventItWaitsForTheLegacyDefaultStream) {
  // The stream is non-blocking (no serialisation with compute), so a tensor written on the
  // legacy default stream is ordered by the mark wait_ready records there. The legacy stream
  // is kept busy first, so that reading too early would see the old values.
  const std::vector<float> x = iota(1 << 20);
  DeviceArray<float> t(x), out(std::vector<float>(x.size(), 0)),
      busy(std::vector<float>(1 << 24, 1));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (int i = 0; i < 200; ++i)
    ASSERT_EQ(nccl::map_on_stream(busy.data, busy.data, 1 << 24, nccl::ScaleType::kFloat32, 1.0,
                                  1.0, nullptr),
              0);
  ASSERT_EQ(
      nccl::map_on_stream(t.data, t.data, 1 << 20, nccl::ScaleType::kFloat32, 3.0, 1.0, nullptr),
      0);
  ASSERT_TRUE(device_->wait_ready(Device::cuda(0), t.data, nullptr, "allreduce 't'").ok());
  ASSERT_TRUE(backend_->allreduce(t.data, out.data, 1 << 20, DataType::kFloat32, {}).ok());
  Status st = fence_and_wait(*device_, "allreduce 't'");
  ASSERT_TRUE(st.ok()) << st.to_string();
  const std::vector<float> got = out.get();
  for (size_t i = 0; i < x.size(); i += 4099) ASSERT_EQ(got[i], 3 * x[i]) << i;
}

TEST_F(NcclOneRankTest, ConcurrentAbortsFailEveryOpWithTheFirstReasonAndNoneOk) {
  // Two callers at once (the runtime's PeerFailure and the watchdog's own error): every op
  // fails, none reports OK (the abort ends kernels, whose events then fire), and the reason is
  // the first caller's.
  DeviceArray<float> t(iota(1 << 22));
  std::vector<Status> results(8, Status::Internal("done never ran"));
  std::atomic<int> calls{0};
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(device_->wait_ready(Device::cuda(0), t.data, nullptr, "allreduce 't'").ok());
    ASSERT_TRUE(backend_->allreduce(t.data, t.data, 1 << 22, DataType::kFloat32, {}).ok());
    ASSERT_TRUE(device_
                    ->fence("allreduce 't" + std::to_string(i) + "'", ignore_event,
                            [&results, &calls, i](const Status& st) {
                              results[static_cast<size_t>(i)] = st;
                              calls.fetch_add(1);
                            })
                    .ok());
  }
  const Status first = Status::PeerFailure("rank 1 (gpu-host-2:4000) closed the connection");
  device_->abort(first);
  std::thread second([&] { device_->abort(Status::Timeout("a later reason")); });
  second.join();
  ASSERT_EQ(calls.load(), 8 - std::count_if(results.begin(), results.end(),
                                            [](const Status& s) { return s.ok(); }));
  for (int i = 0; i < 8; ++i) {
    const Status& st = results[static_cast<size_t>(i)];
    if (st.ok()) continue;  // completed before the abort began: legitimately OK
    EXPECT_EQ(st.code(), StatusCode::kPeerFailure) << st.to_string();
  }
  // An op after the abort never reports OK.
  Status late = fence_and_wait(*device_, "allreduce 'late'");
  EXPECT_EQ(late.to_string(),
            "PeerFailure: allreduce 'late': rank 1 (gpu-host-2:4000) closed the connection");
}

TEST_F(NcclOneRankTest, AnAbortInsideAnOperationEndsItsGroupWithoutItsPostWork) {
  // Review s8 #4: the runtime aborts between an operation's calls (its thread owns the open
  // group). The group is ended without waiting for it to launch (a dead peer would hold that
  // up until KOLO_OP_TIMEOUT) and without queueing its post-scale; the fence then reports the
  // abort's reason, and the next call does not wait on the group's lock.
  DeviceArray<float> t(iota(4096));
  ASSERT_TRUE(device_->wait_ready(Device::cuda(0), t.data, nullptr, "allreduce 't'").ok());
  ASSERT_TRUE(
      backend_->allreduce(t.data, t.data, 4096, DataType::kFloat32, {ReduceOp::kSum, 1.0, 2.0})
          .ok());
  const Status peer = Status::PeerFailure("rank 1 (gpu-host-2:4000) closed the connection");
  device_->abort(peer);
  const Status fenced = fence_and_wait(*device_, "allreduce 't'");
  EXPECT_EQ(fenced.to_string(),
            "PeerFailure: allreduce 't': rank 1 (gpu-host-2:4000) closed the connection");
  Status later = backend_->allreduce(t.data, t.data, 4096, DataType::kFloat32, {});
  EXPECT_EQ(later.code(), StatusCode::kPeerFailure) << later.to_string();
}

TEST(NcclDeathTest, DestroyedOnAThreadThatDoesNotOwnItsOpenGroupItStopsTheProcess) {
  // Review s8 #3: only the thread that opened an NCCL group can end it (NCCL's group state is
  // thread-local) or unlock the mutex it holds for it; from any other thread the shutdown could
  // only hang or corrupt the lock, so it stops the process with a message naming the cause.
  KOLO_REQUIRE_GPU();
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // a fresh process: CUDA does not survive fork
  EXPECT_DEATH(
      {
        Result<std::unique_ptr<Backend>> b = create_backend("nccl", one_rank());
        if (!b.ok()) std::abort();
        auto* device = dynamic_cast<DeviceBackend*>(b->get());
        void* data = nullptr;
        if (cudaMalloc(&data, 256) != cudaSuccess) std::abort();
        std::thread owner([&] {
          if (!device->wait_ready(Device::cuda(0), data, nullptr, "allreduce 'x'").ok() ||
              !(*b)->allreduce(data, data, 64, DataType::kFloat32, {}).ok())
            std::_Exit(3);  // not the death this test is about
        });
        owner.join();
        b->reset();
      },
      "does not own its open NCCL group");
}

TEST_F(NcclOneRankTest, BadTensorsAreErrorsNamingThem) {
  std::vector<float> host(16, 1.0f);
  Status st = device_->wait_ready(Device::cuda(0), host.data(), nullptr, "allreduce 'h'");
  EXPECT_EQ(st.to_string(),
            "InvalidArgument: allreduce 'h': the tensor says cuda:0 but its data pointer is "
            "unregistered host memory");
  // Nothing was queued for it: the fence of the refused operation launches nothing.
  EXPECT_TRUE(device_->fence("allreduce 'h'", ignore_event, [](const Status&) {}).ok());
  st = device_->wait_ready(Device::cuda(visible_gpus()), nullptr, nullptr, "allreduce 'far'");
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("allreduce 'far': the tensor is on cuda:"), std::string::npos)
      << st.to_string();
  EXPECT_TRUE(device_->fence("allreduce 'far'", ignore_event, [](const Status&) {}).ok());
}

TEST_F(NcclOneRankTest, AbortFailsPendingAndLaterOperationsNamingThePeer) {
  const Status peer = Status::PeerFailure("rank 1 (gpu-host-2:4000) closed the connection");
  device_->abort(peer);
  Status late = Status::Ok();
  const Status fenced =
      device_->fence("allreduce 'late'", ignore_event, [&](const Status& st) { late = st; });
  EXPECT_EQ(late.to_string(),
            "PeerFailure: allreduce 'late': rank 1 (gpu-host-2:4000) closed the connection");
  EXPECT_EQ(fenced.to_string(), late.to_string());
  DeviceArray<float> t(iota(8));
  Status st = backend_->allreduce(t.data, t.data, 8, DataType::kFloat32, {});
  EXPECT_EQ(st.code(), StatusCode::kPeerFailure);
  EXPECT_NE(st.message().find("rank 1 (gpu-host-2:4000)"), std::string::npos) << st.to_string();
}

// n random values of dtype as bytes: every bit pattern of an integer (int64 beyond 2^53, where
// the host's double rounds); floats with a random sign and mantissa and an exponent within
// 2^+-10 of one (no NaN, infinity or subnormal: their handling is not the point here).
std::vector<uint8_t> random_values(DataType dtype, int n) {
  std::mt19937_64 rng(12);
  const size_t size = dtype_size(dtype);
  std::vector<uint8_t> bytes(static_cast<size_t>(n) * size);
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  int mantissa_bits = 0;  // of an IEEE-style format of 8 * size bits
  if (dtype == DataType::kFloat16) mantissa_bits = 10;
  if (dtype == DataType::kBFloat16) mantissa_bits = 7;
  if (dtype == DataType::kFloat32) mantissa_bits = 23;
  if (dtype == DataType::kFloat64) mantissa_bits = 52;
  if (mantissa_bits == 0) return bytes;
  const int exponent_bits = static_cast<int>(8 * size) - 1 - mantissa_bits;
  const uint64_t bias = (uint64_t{1} << (exponent_bits - 1)) - 1;
  const uint64_t field = ((uint64_t{1} << exponent_bits) - 1) << mantissa_bits;
  for (size_t at = 0; at < bytes.size(); at += size) {
    uint64_t bits = 0;
    std::memcpy(&bits, bytes.data() + at, size);  // little-endian, as the GPU
    const uint64_t exponent = bias - 10 + rng() % 21;
    bits = (bits & ~field) | (exponent << mantissa_bits);
    std::memcpy(bytes.data() + at, &bits, size);
  }
  return bytes;
}

TEST_F(NcclOneRankTest, TheAverageAndScaleKernelsComputeWhatTheHostComputes) {
  // Review S6: an average over NCCL is a sum, then the division and the postscale on the
  // device; they must give the CPU backends' bytes (ops::finish_reduction) for every dtype, or
  // a job's result would depend on whether its tensors live on a GPU. ncclAvg did not:
  // premultiplied floats, integer-arithmetic integers.
  const int n = 3001;
  for (DataType dtype :
       {DataType::kUInt8, DataType::kInt8, DataType::kInt32, DataType::kInt64, DataType::kFloat16,
        DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64}) {
    std::vector<uint8_t> host = random_values(dtype, n);
    DeviceArray<uint8_t> dev(host);
    ops::finish_reduction(dtype, {ReduceOp::kAverage, 1.0, 0.3}, host.data(), n, 3);
    ASSERT_EQ(
        nccl::map_on_stream(dev.data, dev.data, n, nccl::kernel_type(dtype), 1.0, 3.0, nullptr), 0);
    ASSERT_EQ(
        nccl::map_on_stream(dev.data, dev.data, n, nccl::kernel_type(dtype), 0.3, 1.0, nullptr), 0);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<uint8_t> got = dev.get();
    size_t differ = 0;
    for (size_t i = 0; i < host.size(); ++i) differ += got[i] != host[i];
    EXPECT_EQ(differ, 0u) << dtype_name(dtype) << ": bytes that differ from ops::finish_reduction";
  }
}

TEST_F(NcclOneRankTest, AnIntegerAverageIsTheHostsAverage) {
  // One rank: the division by one is skipped, and the result is the input times the scales,
  // truncated as the host truncates.
  const std::vector<int32_t> x = {-7, -3, 0, 5, 9, 2147483};
  DeviceArray<int32_t> t(x);
  ASSERT_TRUE(backend_
                  ->allreduce(t.data, t.data, static_cast<int64_t>(x.size()), DataType::kInt32,
                              {ReduceOp::kAverage, 1.0, 0.5})
                  .ok());
  std::vector<int32_t> want = x;
  ops::finish_reduction(DataType::kInt32, {ReduceOp::kAverage, 1.0, 0.5}, want.data(),
                        static_cast<int64_t>(want.size()), 1);
  EXPECT_EQ(t.get(), want);
  EXPECT_EQ(want, (std::vector<int32_t>{-3, -1, 0, 2, 4, 1073741}));
}

TEST_F(NcclOneRankTest, ACallNcclRefusesAbortsTheCommunicator) {
  // Review suspicion S5: an invalid argument used to leave the communicator up while the
  // peers' side of the collective waited for this rank until KOLO_OP_TIMEOUT. NCCL's pointer
  // check (NCCL_CHECK_POINTERS, set for this binary above) refuses a host buffer: the call
  // fails, and so does every later one, with that reason. Last of the file: were the check
  // off, the kernel would read host memory and end this process's CUDA context.
  ASSERT_STREQ(std::getenv("NCCL_CHECK_POINTERS"), "1");
  std::vector<float> host(8, 1.0f);
  Status st = backend_->allreduce(host.data(), host.data(), 8, DataType::kFloat32, {});
  ASSERT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  EXPECT_NE(st.message().find("nccl allreduce"), std::string::npos) << st.to_string();
  DeviceArray<float> t(iota(8));
  Status later = backend_->allreduce(t.data, t.data, 8, DataType::kFloat32, {});
  EXPECT_EQ(later.code(), StatusCode::kInvalidArgument) << later.to_string();
  EXPECT_NE(later.message().find(st.message()), std::string::npos) << later.to_string();
}

}  // namespace
}  // namespace kolo
