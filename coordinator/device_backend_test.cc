// The executor's path for a DeviceBackend (nccl's protocol, backends/device_backend.h), run
// without a GPU: a one-rank fake whose collectives are the local backend's on host memory
// labelled cuda:0, and whose fence completes from another thread, as nccl's watchdog does.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "backends/channel_backend.h"
#include "backends/local_backend.h"
#include "common/thread_annotations.h"
#include "coordinator/executor.h"
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
  Result<void*> stand_in(size_t bytes, const std::string& what) override {
    MutexLock lock(mu_);
    log_.push_back("stand_in " + what);
    if (fail_stand_in_)
      return Status::Internal(what + ": a stand-in output: allocating " + std::to_string(bytes) +
                              " bytes of device memory: out of memory");
    stand_in_.resize(bytes);
    return static_cast<void*>(stand_in_.data());
  }
  Status fence(const std::string& what, const Publish& publish, Done done) override {
    auto event = std::make_shared<int>(0);
    {
      MutexLock lock(mu_);
      log_.push_back("fence " + what);
      if (fail_fence_) {
        // NCCL refused the group: nccl aborts, fails the op and reports it.
        log_.push_back("abort at fence");
        Status st = Status::InvalidArgument(what +
                                            ": NCCL error ncclInvalidArgument: invalid "
                                            "argument (ncclGroupEnd)");
        lock.unlock();
        done(st);
        return st;
      }
      if (!complete_in_fence_) {
        publish(event);
        queue_.push_back(std::move(done));
        cv_.notify_all();
        return Status::Ok();
      }
    }
    // The watchdog's fastest case: the op completes before fence returns.
    publish(event);
    done(Status::Ok());
    return Status::Ok();
  }
  void abort(const Status& why) override {
    MutexLock lock(mu_);
    log_.push_back("abort " + why.to_string());
  }
  Status failure() const override {
    MutexLock lock(mu_);
    return failure_;
  }

  std::vector<std::string> log() const {
    MutexLock lock(mu_);
    return log_;
  }
  void poison(const void* data) {
    MutexLock lock(mu_);
    poisoned_ = data;
  }
  void complete_in_fence() {
    MutexLock lock(mu_);
    complete_in_fence_ = true;
  }
  // The watchdog's own abort (an NCCL error, the op timeout), which nobody asked for.
  void abort_by_itself(const Status& why) {
    MutexLock lock(mu_);
    failure_ = why;
  }
  void fail_fence() {
    MutexLock lock(mu_);
    fail_fence_ = true;
  }
  // The device cannot even allocate a stand-in output.
  void fail_stand_in() {
    MutexLock lock(mu_);
    fail_stand_in_ = true;
  }
  // The "GPU" stays busy: no operation completes until release_completions().
  void hold_completions() {
    MutexLock lock(mu_);
    held_ = true;
  }
  void release_completions() {
    {
      MutexLock lock(mu_);
      held_ = false;
    }
    cv_.notify_all();
  }
  // Fuses a batch itself, as nccl does with its device fusion buffer (allreduce_pieces).
  void fuse_pieces() { fuse_pieces_ = true; }
  bool has_allreduce_pieces() const override { return fuse_pieces_; }
  std::thread::id completer_id() const { return completer_.get_id(); }

 protected:
  Status do_allreduce(const void* in, void* out, int64_t n, DataType dt,
                      const Reduction& r) override {
    record("allreduce");
    return local_->allreduce(in, out, n, dt, r);
  }
  Status do_allreduce_pieces(const std::vector<AllreducePiece>& pieces, DataType dt,
                             const Reduction& r) override {
    record("allreduce_pieces " + std::to_string(pieces.size()));
    const size_t es = dtype_size(dt);
    std::vector<char> fused;
    for (const AllreducePiece& p : pieces)
      fused.insert(fused.end(), static_cast<const char*>(p.input),
                   static_cast<const char*>(p.input) + p.count * es);
    const int64_t total = static_cast<int64_t>(fused.size() / es);
    KOLO_RETURN_IF_ERROR(local_->allreduce(fused.data(), fused.data(), total, dt, r));
    size_t offset = 0;
    for (const AllreducePiece& p : pieces) {
      std::memcpy(p.output, fused.data() + offset, p.count * es);
      offset += p.count * es;
    }
    return Status::Ok();
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
        while (!stop_ && (queue_.empty() || held_)) cv_.wait(lock.native());
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
  bool complete_in_fence_ KOLO_GUARDED_BY(mu_) = false;
  bool fail_fence_ KOLO_GUARDED_BY(mu_) = false;
  bool fail_stand_in_ KOLO_GUARDED_BY(mu_) = false;
  std::atomic<bool> fuse_pieces_{false};
  Status failure_ KOLO_GUARDED_BY(mu_);
  std::vector<char> stand_in_ KOLO_GUARDED_BY(mu_);
  bool stop_ KOLO_GUARDED_BY(mu_) = false;
  bool held_ KOLO_GUARDED_BY(mu_) = false;
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

TensorView host_view(std::vector<float>& v) {
  return view_of(v.data(), {static_cast<int64_t>(v.size())});
}

// Labels a built entry's tensors cuda:0 (their memory stays on the host: the fake backend
// reduces it there), after the builder's device check, which needs a real device.
std::unique_ptr<Entry> on_cuda(Result<std::unique_ptr<Entry>> built, void* ready_event = nullptr) {
  EXPECT_TRUE(built.ok()) << built.status().to_string();
  std::unique_ptr<Entry> e = std::move(*built);
  e->request.device = Device::cuda(0);
  for (auto& v : e->inputs) {
    v.device = Device::cuda(0);
    v.ready_event = ready_event;
  }
  for (auto& v : e->outputs) v.device = Device::cuda(0);
  return e;
}

TEST(DeviceBackendTest, CudaTensorsWaitForTheirEventAndCompleteThroughTheFence) {
  OneRank one;
  std::vector<float> x(8, 3.0f);
  int producer_event = 0;  // any non-null pointer: the fake only records that one was passed
  AllreduceOptions opts;
  opts.reduction.postscale = 2.0;
  auto built = on_cuda(build_allreduce("x", host_view(x), host_view(x), opts), &producer_event);
  std::thread::id completed_on;
  Handle h = one.runtime->submit(std::move(built));
  h.then([&](const Status&) { completed_on = std::this_thread::get_id(); });
  ASSERT_TRUE(h.wait(std::chrono::seconds(20)).ok()) << h.status().to_string();
  EXPECT_EQ(x, std::vector<float>(8, 6.0f));
  EXPECT_NE(h.completion_event(), nullptr);
  EXPECT_EQ(completed_on, one.fake->completer_id());  // not the background thread
  EXPECT_EQ(one.fake->log(), (std::vector<std::string>{"wait_ready allreduce 'x' event",
                                                       "allreduce", "fence allreduce 'x'"}));
}

// A batch of several CUDA tensors goes to a backend that fuses them itself in one
// allreduce_pieces call (nccl's device fusion buffer), with the scales applied once, instead of
// one call per tensor; a single tensor still takes a plain allreduce.
TEST(DeviceBackendTest, ABatchOfCudaTensorsIsOneAllreducePiecesCall) {
  OneRank one;
  one.fake->fuse_pieces();
  std::vector<float> a(5, 1.0f), b(3, 2.0f), c(4, 3.0f);
  AllreduceOptions opts;
  opts.reduction.prescale = 2.0;
  opts.reduction.postscale = 0.5;
  std::vector<TensorView> views = {host_view(a), host_view(b)};
  auto grouped = on_cuda(build_grouped_allreduce("g", views, opts));
  Handle h = one.runtime->submit(std::move(grouped));
  ASSERT_TRUE(h.wait(std::chrono::seconds(20)).ok()) << h.status().to_string();
  EXPECT_EQ(a, std::vector<float>(5, 1.0f));  // x * 2 * 0.5 on one rank
  EXPECT_EQ(b, std::vector<float>(3, 2.0f));
  Handle single = one.runtime->submit(
      on_cuda(build_allreduce("c", host_view(c), host_view(c), {.reduction = {.prescale = 3.0}})));
  ASSERT_TRUE(single.wait(std::chrono::seconds(20)).ok()) << single.status().to_string();
  EXPECT_EQ(c, std::vector<float>(4, 9.0f));
  const std::vector<std::string> log = one.fake->log();
  EXPECT_EQ(std::count(log.begin(), log.end(), "allreduce_pieces 2"), 1);
  EXPECT_EQ(std::count(log.begin(), log.end(), "allreduce"), 1);  // "c"
}

TEST(DeviceBackendTest, DeviceOutputsNeedAnAllocator) {
  OneRank one;
  std::vector<float> x(4, 1.0f);
  auto built = on_cuda(build_allgather("g", host_view(x), {}));
  Handle h = one.runtime->submit(std::move(built));
  Status st = h.wait(std::chrono::seconds(20));
  EXPECT_EQ(st.to_string(),
            "InvalidArgument: allgather 'g': CUDA tensors on backend fakegpu need an output "
            "allocator that returns memory on cuda:0 (without one the output is a HostTensor "
            "in host memory)");
  // Nothing was queued for it (the runtime then stopped, as for any refused device tensor).
  const std::vector<std::string> log = one.fake->log();
  ASSERT_FALSE(log.empty());
  EXPECT_EQ(log.front(), "fence allgather 'g'");
  EXPECT_EQ(std::count(log.begin(), log.end(), "allgather"), 0);
}

// Whether the fake logs a line starting with `prefix` within 20 s (the runtime stops on its
// background thread, after the handle completed).
bool logs_within_20s(const FakeDeviceBackend& fake, const std::string& prefix) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    for (const auto& line : fake.log())
      if (line.rfind(prefix, 0) == 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

// The outcome of a host allreduce submitted after the runtime stopped: its failure.
Status later_host_op(OneRank& one) {
  std::vector<float> y(4, 1.0f);
  auto later = build_allreduce("later", view_of(y.data(), {4}), view_of(y.data(), {4}), {});
  if (!later.ok()) return later.status();
  return one.runtime->submit(std::move(*later)).wait(std::chrono::seconds(20));
}

TEST(DeviceBackendTest, ARefusedTensorFailsItsHandleNamingItAndStopsTheRuntime) {
  OneRank one;
  std::vector<float> x(4, 1.0f);
  one.fake->poison(x.data());
  auto built = on_cuda(build_allreduce("bad", host_view(x), host_view(x), {}));
  Handle h = one.runtime->submit(std::move(built));
  Status st = h.wait(std::chrono::seconds(20));
  EXPECT_EQ(st.to_string(),
            "InvalidArgument: allreduce 'bad': the tensor says cuda:0 but its data pointer is "
            "unregistered host memory");
  // The runtime stopped (peers may be inside the collective) and aborted the GPU backend.
  EXPECT_TRUE(logs_within_20s(*one.fake, "abort "));
  EXPECT_EQ(later_host_op(one).code(), StatusCode::kInvalidArgument);
}

TEST(DeviceBackendTest, AnOperationThatCannotLaunchFailsItsHandleAndStopsTheRuntime) {
  // NCCL refused this rank's group (settle: an invalid argument): the peers launched their side
  // and wait for this rank, so the runtime stops (it used to go on, and the peers waited for
  // KOLO_OP_TIMEOUT), and the control plane tells them.
  OneRank one;
  one.fake->fail_fence();
  std::vector<float> x(4, 1.0f);
  Handle h = one.runtime->submit(on_cuda(build_allreduce("x", host_view(x), host_view(x), {})));
  EXPECT_EQ(h.wait(std::chrono::seconds(20)).to_string(),
            "InvalidArgument: allreduce 'x': NCCL error ncclInvalidArgument: invalid argument "
            "(ncclGroupEnd)");
  // The runtime's fail_all_and_abort, with the fence's error.
  EXPECT_TRUE(logs_within_20s(*one.fake, "abort InvalidArgument"));
  EXPECT_EQ(later_host_op(one).to_string(),
            "InvalidArgument: allreduce 'x': NCCL error ncclInvalidArgument: invalid argument "
            "(ncclGroupEnd)");
}

TEST(DeviceBackendTest, ABackendThatAbortedByItselfStopsTheRuntime) {
  // Review S2: the watchdog aborted (a peer's side of an operation never came), and the
  // runtime went on as if nothing happened: the peers, stuck in their side of that operation,
  // learnt nothing until their own op timeout, and a shutdown waited for it. Now the runtime
  // stops within a cycle, with the backend's reason, which the control plane carries.
  OneRank one;
  const Status timeout = Status::Timeout(
      "allreduce 'w': did not complete on the GPU within 1.0 s (KOLO_OP_TIMEOUT): a peer is "
      "dead or stuck, or the ranks' operations do not match");
  one.fake->abort_by_itself(timeout);
  EXPECT_EQ(later_host_op(one).to_string(), timeout.to_string());
  EXPECT_TRUE(logs_within_20s(*one.fake, "abort " + timeout.to_string()));
}

TEST(DeviceBackendTest, AGpuOperationsSpansEndWhenTheDeviceFinishedIt) {
  // They used to end when the operation was queued, so a trace showed no GPU time at all. The
  // fake's "GPU" works 20 ms after the fence: the backend's span lasts at least that long.
  OneRank one;
  const std::string trace =
      ::testing::TempDir() + "device_spans_" + std::to_string(::getpid()) + ".json";
  ASSERT_TRUE(one.runtime->timeline().start(trace, 0).ok());
  std::vector<float> x(8, 1.0f);
  Handle h = one.runtime->submit(on_cuda(build_allreduce("x", host_view(x), host_view(x), {})));
  ASSERT_TRUE(h.wait(std::chrono::seconds(20)).ok()) << h.status().to_string();
  one.runtime->timeline().stop();
  std::ifstream in(trace);
  const nlohmann::json events = nlohmann::json::parse(in);
  std::remove(trace.c_str());
  const nlohmann::json *op = nullptr, *gpu = nullptr;
  for (const auto& e : events) {
    if (e.at("ph") != "X") continue;
    if (e.at("name") == "ALLREDUCE") op = &e;
    if (e.at("name") == "FAKEGPU_ALLREDUCE") gpu = &e;
  }
  ASSERT_NE(op, nullptr) << events.dump();
  ASSERT_NE(gpu, nullptr) << events.dump();
  EXPECT_GE(gpu->at("dur").get<double>(), 20000.0);  // microseconds
  auto end = [](const nlohmann::json& e) {
    return e.at("ts").get<double>() + e.at("dur").get<double>();
  };
  EXPECT_LE(op->at("ts").get<double>(), gpu->at("ts").get<double>());
  EXPECT_GE(end(*op), end(*gpu));
  EXPECT_EQ(op->at("args").at("backend"), "fakegpu");
  EXPECT_EQ(op->at("args").at("status"), "OK");
  EXPECT_EQ(op->at("args").at("fused"), 1);
  EXPECT_EQ(op->at("tid"), gpu->at("tid"));
}

// Issue 32 (Note [Device spans per batch] in executor_device.cc): a fused batch on a device
// backend records its phases once, on its first tensor's operation, with the batch's tensor
// count; every tensor's operation span is still there, with its own args, and ends when the
// device finished the batch, after the device span.
TEST(DeviceBackendTest, AFusedDeviceBatchRecordsOneDeviceSpanAndEveryTensorsOperation) {
  const std::string trace =
      ::testing::TempDir() + "device_batch_" + std::to_string(::getpid()) + ".json";
  std::unique_ptr<Backend> local = make_local_backend("local");
  FakeDeviceBackend fake;
  fake.fuse_pieces();
  Timeline timeline;
  ASSERT_TRUE(timeline.start(trace, 0).ok());
  Executor executor(*local, timeline, "", &fake);
  std::vector<float> a(3, 1.0f), b(5, 2.0f), c(2, 3.0f);
  std::vector<std::unique_ptr<Entry>> entries;
  std::vector<Response> responses(3);
  const std::vector<std::pair<std::string, std::vector<float>*>> tensors = {
      {"a", &a}, {"b", &b}, {"c", &c}};
  for (size_t i = 0; i < tensors.size(); ++i) {
    auto& [name, v] = tensors[i];
    entries.push_back(on_cuda(build_allreduce(name, host_view(*v), host_view(*v), {})));
    entries.back()->trace_kind = "ALLREDUCE";
    entries.back()->trace = timeline.begin_op(name, "ALLREDUCE");
    responses[i].name = name;
    responses[i].shapes = {{static_cast<int64_t>(v->size())}};
    responses[i].device = Device::cuda(0);
  }
  std::vector<BatchItem> batch;
  for (size_t i = 0; i < entries.size(); ++i) batch.push_back({&responses[i], entries[i].get()});
  ASSERT_TRUE(executor.run(batch).ok());
  for (auto& e : entries) ASSERT_TRUE(Handle(e->state).wait(std::chrono::seconds(20)).ok());
  timeline.stop();
  std::ifstream in(trace);
  const nlohmann::json events = nlohmann::json::parse(in);
  std::remove(trace.c_str());
  std::map<int, std::string> rows;
  std::map<std::string, nlohmann::json> ops;
  std::vector<nlohmann::json> device, waits;
  for (const auto& e : events) {
    if (e.at("ph") == "M" && e.at("name") == "thread_name")
      rows[e.at("tid")] = e.at("args").at("name");
    if (e.at("ph") != "X") continue;
    if (e.at("name") == "ALLREDUCE") ops[rows.at(e.at("tid"))] = e;
    if (e.at("name") == "FAKEGPU_ALLREDUCE") device.push_back(e);
    if (e.at("name") == "WAIT_FOR_DATA") waits.push_back(e);
  }
  const std::vector<std::string> log = fake.log();
  EXPECT_EQ(std::count(log.begin(), log.end(), "allreduce_pieces 3"), 1);
  ASSERT_EQ(device.size(), 1u) << events.dump();
  ASSERT_EQ(waits.size(), 1u) << events.dump();
  EXPECT_EQ(rows.at(device[0].at("tid")), "a");
  EXPECT_EQ(device[0].at("args").at("tensors"), 3);
  EXPECT_GE(device[0].at("dur").get<double>(), 20000.0);  // the fake "GPU" works 20 ms
  ASSERT_EQ(ops.size(), 3u) << events.dump();
  const double device_end = device[0].at("ts").get<double>() + device[0].at("dur").get<double>();
  for (const auto& [name, bytes] :
       std::vector<std::pair<std::string, int>>{{"a", 12}, {"b", 20}, {"c", 8}}) {
    const nlohmann::json& op = ops[name];
    EXPECT_EQ(op.at("args"), (nlohmann::json{{"bytes", bytes},
                                             {"dtype", "float32"},
                                             {"shape", "[" + std::to_string(bytes / 4) + "]"},
                                             {"backend", "fakegpu"},
                                             {"fused", 3},
                                             {"fused_bytes", 40},
                                             {"status", "OK"}}))
        << name;
    EXPECT_GE(op.at("ts").get<double>() + op.at("dur").get<double>(), device_end) << name;
  }
}

// Issue 33: a GPU operation's spans stay open until the device finished it, while its
// tensor's name is free again at once. The next operation of the name, submitted meanwhile,
// used to begin on the same row and overlap the first; now it goes on the sibling row "x (2)"
// (Note [Timeline rows]), and every row's spans follow one another.
TEST(DeviceBackendTest, TheNextOperationOfATensorStillOnTheGpuGoesOnASiblingRow) {
  OneRank one;
  const std::string trace =
      ::testing::TempDir() + "device_rows_" + std::to_string(::getpid()) + ".json";
  ASSERT_TRUE(one.runtime->timeline().start(trace, 0).ok());
  std::vector<float> x(8, 1.0f), y(8, 1.0f);
  one.fake->hold_completions();
  Handle first = one.runtime->submit(on_cuda(build_allreduce("x", host_view(x), host_view(x), {})));
  // The name frees when the first is claimed for execution, while the "GPU" still holds it.
  Handle second;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  do {
    second = one.runtime->submit(on_cuda(build_allreduce("x", host_view(y), host_view(y), {})));
  } while (second.poll() && std::chrono::steady_clock::now() < deadline);
  EXPECT_FALSE(first.poll());
  one.fake->release_completions();
  ASSERT_TRUE(first.wait(std::chrono::seconds(20)).ok()) << first.status().to_string();
  ASSERT_TRUE(second.wait(std::chrono::seconds(20)).ok()) << second.status().to_string();
  one.runtime->timeline().stop();
  std::ifstream in(trace);
  const nlohmann::json events = nlohmann::json::parse(in);
  std::remove(trace.c_str());
  std::map<int, std::string> rows;
  std::vector<std::pair<int, std::pair<double, double>>> ops;  // row, [begin, end]
  for (const auto& e : events) {
    if (e.at("ph") == "M" && e.at("name") == "thread_name")
      rows[e.at("tid")] = e.at("args").at("name");
    if (e.at("ph") == "X" && e.at("name") == "ALLREDUCE") {
      const double ts = e.at("ts");
      ops.push_back({e.at("tid"), {ts, ts + e.at("dur").get<double>()}});
    }
  }
  ASSERT_EQ(ops.size(), 2u) << events.dump();
  std::sort(ops.begin(), ops.end(), [](auto& a, auto& b) { return a.second < b.second; });
  // The second was submitted before the first left the GPU: two rows.
  ASSERT_LT(ops[1].second.first, ops[0].second.second) << events.dump();
  EXPECT_EQ(rows[ops[0].first], "x");
  EXPECT_EQ(rows[ops[1].first], "x (2)");
}

TEST(DeviceBackendTest, TheCompletionEventIsSetBeforeTheHandleCompletes) {
  // The watchdog may complete an op the moment it is registered: a callback that runs at
  // completion (a c10d-style Work::synchronize) must already find the event.
  OneRank one;
  one.fake->complete_in_fence();
  std::vector<float> x(8, 1.0f);
  auto built = on_cuda(build_allreduce("x", host_view(x), host_view(x), {}));
  std::shared_ptr<detail::OpState> state = built->state;
  void* seen = &seen;  // overwritten by the callback
  state->then([&seen, state](const Status&) { seen = state->completion_event(); });
  Handle h = one.runtime->submit(std::move(built));
  ASSERT_TRUE(h.wait(std::chrono::seconds(20)).ok()) << h.status().to_string();
  EXPECT_NE(seen, nullptr);
  EXPECT_NE(seen, static_cast<void*>(&seen));
  EXPECT_EQ(seen, h.completion_event());
}

TEST(DeviceBackendTest, AJoinedRanksBatchIsNeitherPreparedNorFencedOnTheDevice) {
  // A rank that joined has no entry for a CUDA op: every rank refuses it (Unsupported) before
  // any backend call, and this rank has no handle, so nothing may be queued or fenced (a fenced
  // op without a handle left the watchdog querying a destroyed event).
  FakeDeviceBackend fake;
  std::unique_ptr<Backend> local = make_local_backend("local");
  Timeline timeline;
  Executor executor(*local, timeline, "", &fake);
  Response r;
  r.name = "w";
  r.type = OpType::kAllreduce;
  r.device = Device::cuda(0);
  r.shapes = {{4}};
  r.joined = {0};
  EXPECT_TRUE(executor.run({BatchItem{&r, nullptr}}).ok());
  EXPECT_TRUE(fake.log().empty()) << fake.log().front();
}

std::vector<std::string> ops_of(const std::vector<std::string>& log) {
  std::vector<std::string> out;
  for (const auto& line : log)
    if (line.rfind("abort ", 0) != 0) out.push_back(line);  // the runtime's stop, if any
  return out;
}

TEST(DeviceBackendTest, ANullAllocatorOutputStandsInOnTheDevice) {
  // Host scratch given to NCCL would be an illegal address, which ends the CUDA context.
  OneRank one;
  std::vector<float> x(4, 1.0f);
  AllgatherOptions opts;
  opts.allocator = [](const std::vector<int64_t>&, DataType) -> void* { return nullptr; };
  Handle h = one.runtime->submit(on_cuda(build_allgather("g", host_view(x), opts)));
  EXPECT_EQ(h.wait(std::chrono::seconds(20)).to_string(),
            "InvalidArgument: allgather 'g': the output allocator returned null for shape [4]");
  EXPECT_EQ(ops_of(one.fake->log()),
            (std::vector<std::string>{"wait_ready allgather 'g'", "stand_in allgather 'g'",
                                      "allgather", "fence allgather 'g'"}));
}

// When not even the stand-in can be allocated, the output is null: the backend refuses it
// (an error, not a crash), and the handle fails with the allocator's error, which names the
// tensor (not the backend's "output must be non-null").
TEST(DeviceBackendTest, WithoutAStandInTheOperationFailsWithTheAllocatorsError) {
  OneRank one;
  one.fake->fail_stand_in();
  std::vector<float> x(4, 1.0f);
  AllgatherOptions opts;
  opts.allocator = [](const std::vector<int64_t>&, DataType) -> void* { return nullptr; };
  Handle h = one.runtime->submit(on_cuda(build_allgather("g", host_view(x), opts)));
  EXPECT_EQ(h.wait(std::chrono::seconds(20)).to_string(),
            "InvalidArgument: allgather 'g': the output allocator returned null for shape [4]");
  const std::vector<std::string> log = ops_of(one.fake->log());
  EXPECT_EQ(std::count(log.begin(), log.end(), "stand_in allgather 'g'"), 1);
  EXPECT_EQ(std::count(log.begin(), log.end(), "allgather"), 0);  // nothing queued
}

TEST(DeviceBackendTest, AnAllocatorOutputInHostMemoryIsRefusedAndStandsInOnTheDevice) {
  OneRank one;
  std::vector<float> x(4, 1.0f), host_out(4, 0.0f);
  one.fake->poison(host_out.data());  // the fake's "not device memory"
  AllgatherOptions opts;
  opts.allocator = [&](const std::vector<int64_t>&, DataType) -> void* { return host_out.data(); };
  Handle h = one.runtime->submit(on_cuda(build_allgather("g", host_view(x), opts)));
  EXPECT_EQ(h.wait(std::chrono::seconds(20)).to_string(),
            "InvalidArgument: allgather 'g' (output): the tensor says cuda:0 but its data "
            "pointer is unregistered host memory");
  EXPECT_EQ(
      ops_of(one.fake->log()),
      (std::vector<std::string>{"wait_ready allgather 'g'", "wait_ready allgather 'g' (output)",
                                "stand_in allgather 'g'", "allgather", "fence allgather 'g'"}));
  EXPECT_EQ(host_out, std::vector<float>(4, 0.0f));  // never written
}

// A measurement, not a check (disabled: run it with --gtest_also_run_disabled_tests): the host
// cost of the timeline on a device backend's step, without a GPU. ResNet-50's 161 gradient
// tensors (16 floats each: the data is not the point) are submitted and waited as kolo-bench
// fusion --device cuda does, on the fake device backend completing each operation inside its
// fence; the median step with the timeline recording and without is printed. What a GPU step
// costs on top is the device's; issue 32's 5% goal is confirmed only by kolo-bench fusion
// --device cuda on a GPU (scripts/gpu-check.sh).
TEST(DeviceBackendTest, DISABLED_TimelineHostCostOfADeviceStep) {
  for (const bool traced : {false, true}) {
    OneRank one;
    one.fake->fuse_pieces();
    one.fake->complete_in_fence();
    const std::string trace =
        ::testing::TempDir() + "device_step_" + std::to_string(::getpid()) + ".json";
    if (traced) ASSERT_TRUE(one.runtime->timeline().start(trace, 0).ok());
    std::vector<std::vector<float>> grads(161, std::vector<float>(16, 1.0f));
    std::vector<double> us;
    for (int step = 0; step < 60; ++step) {
      const auto t0 = std::chrono::steady_clock::now();
      std::vector<Handle> handles;
      for (size_t k = grads.size(); k-- > 0;)
        handles.push_back(one.runtime->submit(on_cuda(build_allreduce(
            "grad." + std::to_string(k), host_view(grads[k]), host_view(grads[k]), {}))));
      for (Handle& h : handles) ASSERT_TRUE(h.wait(std::chrono::seconds(20)).ok());
      if (step >= 10)  // warm-up
        us.push_back(
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                .count());
    }
    if (traced) one.runtime->timeline().stop();
    std::remove(trace.c_str());
    std::sort(us.begin(), us.end());
    std::printf("timeline %s: median step %.0f us (quartiles %.0f, %.0f)\n", traced ? "on " : "off",
                us[us.size() / 2], us[us.size() / 4], us[3 * us.size() / 4]);
  }
}

}  // namespace
}  // namespace kolo::coord
