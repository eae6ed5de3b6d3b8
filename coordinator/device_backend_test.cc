// The executor's path for a DeviceBackend (nccl's protocol, backends/device_backend.h), run
// without a GPU: a one-rank fake whose collectives are the local backend's on host memory
// labelled cuda:0, and whose fence completes from another thread, as nccl's watchdog does.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <thread>

#include "backends/channel_backend.h"
#include "backends/local_backend.h"
#include "common/thread_annotations.h"
#include "coordinator/runtime.h"
#include "coordinator/submit.h"
#include "coordinator/test_cluster.h"

namespace kolo::coord {
namespace {

class FakeDeviceBackend : public DeviceBackend {
 public:
  FakeDeviceBackend() : local_(make_local_backend("fake-gpu")) {
    completer_ = std::thread([this] { complete_loop(); });
  }
  ~FakeDeviceBackend() override {
    {
      MutexLock lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    completer_.join();
  }
  std::string_view name() const override { return "fakegpu"; }
  int rank() const override { return 0; }
  int size() const override { return 1; }
  bool supports(Device device) const override { return device.is_cuda(); }

  Status wait_ready(Device device, const void* data, void* ready_event,
                    const std::string& what) override {
    MutexLock lock(mu_);
    log_.push_back("wait_ready " + what + (ready_event ? " event" : ""));
    if (data == poisoned_)
      return Status::InvalidArgument(what + ": the tensor says " + device.to_string() +
                                     " but its data pointer is unregistered host memory");
    return Status::Ok();
  }
  std::shared_ptr<void> fence(const std::string& what, Done done) override {
    MutexLock lock(mu_);
    log_.push_back("fence " + what);
    auto event = std::make_shared<int>(static_cast<int>(log_.size()));
    queue_.push_back(std::move(done));
    cv_.notify_all();
    return event;
  }
  void abort(const Status& why) override {
    MutexLock lock(mu_);
    log_.push_back("abort " + why.to_string());
  }

  std::vector<std::string> log() const {
    MutexLock lock(mu_);
    return log_;
  }
  void poison(const void* data) {
    MutexLock lock(mu_);
    poisoned_ = data;
  }
  std::thread::id completer_id() const { return completer_.get_id(); }

 protected:
  Status do_allreduce(const void* in, void* out, int64_t n, DataType dt,
                      const Reduction& r) override {
    record("allreduce");
    return local_->allreduce(in, out, n, dt, r);
  }
  Status do_allgather(const void* in, void* out, DataType dt,
                      const std::vector<int64_t>& counts) override {
    record("allgather");
    return local_->allgather(in, out, dt, counts);
  }

 private:
  void record(const std::string& op) {
    MutexLock lock(mu_);
    log_.push_back(op);
  }
  void complete_loop() {
    for (;;) {
      Done done;
      {
        MutexLock lock(mu_);
        while (!stop_ && queue_.empty()) cv_.wait(lock.native());
        if (queue_.empty()) return;
        done = std::move(queue_.front());
        queue_.pop_front();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the "GPU" works
      done(Status::Ok());
    }
  }

  std::unique_ptr<Backend> local_;
  mutable Mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> log_ KOLO_GUARDED_BY(mu_);
  std::deque<Done> queue_ KOLO_GUARDED_BY(mu_);
  const void* poisoned_ KOLO_GUARDED_BY(mu_) = nullptr;
  bool stop_ KOLO_GUARDED_BY(mu_) = false;
  std::thread completer_;
};

struct OneRank {
  OneRank() {
    auto gpu = std::make_unique<FakeDeviceBackend>();
    fake = gpu.get();
    auto rt = Runtime::create(testkit::test_config(), Topology{}, make_local_backend("local"),
                              make_local_backend("control"), std::move(gpu));
    EXPECT_TRUE(rt.ok()) << rt.status().to_string();
    runtime = std::move(*rt);
  }
  FakeDeviceBackend* fake = nullptr;
  std::unique_ptr<Runtime> runtime;
};

TensorView cuda_view(std::vector<float>& v, void* ready_event = nullptr) {
  TensorView t = view_of(v.data(), {static_cast<int64_t>(v.size())});
  t.device = Device::cuda(0);
  t.ready_event = ready_event;
  return t;
}

TEST(DeviceBackendTest, CudaTensorsWaitForTheirEventAndCompleteThroughTheFence) {
  OneRank one;
  std::vector<float> x(8, 3.0f);
  int producer_event = 0;  // any non-null pointer: the fake only records that one was passed
  const TensorView t = cuda_view(x, &producer_event);
  AllreduceOptions opts;
  opts.postscale = 2.0;
  auto built = build_allreduce("x", t, t, opts);
  ASSERT_TRUE(built.ok()) << built.status().to_string();
  (*built)->request.device = Device::cuda(0);
  std::thread::id completed_on;
  Handle h = one.runtime->submit(std::move(*built));
  h.then([&](const Status&) { completed_on = std::this_thread::get_id(); });
  ASSERT_TRUE(h.wait(std::chrono::seconds(20)).ok()) << h.status().to_string();
  EXPECT_EQ(x, std::vector<float>(8, 6.0f));
  EXPECT_NE(h.completion_event(), nullptr);
  EXPECT_EQ(completed_on, one.fake->completer_id());  // not the background thread
  EXPECT_EQ(one.fake->log(), (std::vector<std::string>{"wait_ready allreduce 'x' event",
                                                       "allreduce", "fence allreduce 'x'"}));
}

TEST(DeviceBackendTest, DeviceOutputsNeedAnAllocator) {
  OneRank one;
  std::vector<float> x(4, 1.0f);
  auto built = build_allgather("g", cuda_view(x), {});
  ASSERT_TRUE(built.ok()) << built.status().to_string();
  (*built)->request.device = Device::cuda(0);
  Handle h = one.runtime->submit(std::move(*built));
  Status st = h.wait(std::chrono::seconds(20));
  EXPECT_EQ(st.to_string(),
            "InvalidArgument: allgather 'g': CUDA tensors on backend fakegpu need an output "
            "allocator that returns memory on cuda:0 (without one the output is a HostTensor "
            "in host memory)");
  // Nothing was queued for it; the fence ended the backend's operation.
  EXPECT_EQ(one.fake->log().back(), "fence allgather 'g'");
}

TEST(DeviceBackendTest, ARefusedTensorFailsItsHandleNamingItAndStopsTheRuntime) {
  OneRank one;
  std::vector<float> x(4, 1.0f);
  one.fake->poison(x.data());
  const TensorView t = cuda_view(x);
  auto built = build_allreduce("bad", t, t, {});
  ASSERT_TRUE(built.ok()) << built.status().to_string();
  (*built)->request.device = Device::cuda(0);
  Handle h = one.runtime->submit(std::move(*built));
  Status st = h.wait(std::chrono::seconds(20));
  EXPECT_EQ(st.to_string(),
            "InvalidArgument: allreduce 'bad': the tensor says cuda:0 but its data pointer is "
            "unregistered host memory");
  // The runtime stopped (peers may be inside the collective) and aborted the GPU backend.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  bool aborted = false;
  while (!aborted && std::chrono::steady_clock::now() < deadline) {
    for (const auto& line : one.fake->log()) aborted |= line.rfind("abort ", 0) == 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(aborted);
  std::vector<float> y(4, 1.0f);
  Handle later = one.runtime->submit(
      std::move(*build_allreduce("later", view_of(y.data(), {4}), view_of(y.data(), {4}), {})));
  EXPECT_EQ(later.wait(std::chrono::seconds(20)).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kolo::coord
