// Test support: several Runtimes in one process (one per thread-rank), connected by thread
// channels (data and control planes) wrapped in ChannelBackends. Header-only, tests only.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "backends/channel_backend.h"
#include "coordinator/runtime.h"
#include "coordinator/submit.h"
#include "ops/thread_channel.h"

namespace kolo::coord::testkit {

using namespace std::chrono_literals;

// The registry's defaults (RuntimeConfig has none of its own), with a short heartbeat and no
// stall check, for tests that run many short jobs.
inline RuntimeConfig test_config() {
  RuntimeConfig c = config_from_knobs(KnobSet::defaults(), "thread").value();
  c.heartbeat = 20ms;
  c.cycle_time = 1ms;
  c.stall_check_time = 0ns;
  return c;
}

// The data backend of one rank around its thread channel.
using MakeDataBackend = std::function<std::unique_ptr<Backend>(std::unique_ptr<ops::Channel>)>;

inline std::unique_ptr<Backend> thread_backend(std::unique_ptr<ops::Channel> channel) {
  return std::make_unique<ChannelBackend>("thread", std::move(channel));
}

class Cluster {
 public:
  explicit Cluster(int size, RuntimeConfig config = test_config(),
                   std::chrono::milliseconds timeout = 20s, int start_ranks = -1,
                   const MakeDataBackend& make_data = thread_backend) {
    auto data = ops::make_thread_channels(size, timeout);
    auto ctrl = ops::make_thread_channels(size, timeout);
    if (start_ranks < 0) start_ranks = size;
    for (int r = 0; r < start_ranks; ++r) {
      Topology t;
      t.rank = r;
      t.size = size;
      auto rt = Runtime::create(config, t, make_data(std::move(data[r])),
                                std::make_unique<ChannelBackend>("ctrl", std::move(ctrl[r])));
      EXPECT_TRUE(rt.ok()) << rt.status().to_string();
      runtimes_.push_back(std::move(*rt));
    }
    spare_.insert(spare_.end(), std::make_move_iterator(data.begin()),
                  std::make_move_iterator(data.end()));
  }
  ~Cluster() {
    // Every rank shuts down together, as a job's ranks do at exit.
    std::vector<std::thread> ts;
    for (auto& rt : runtimes_) ts.emplace_back([&rt] { (void)rt->shutdown(); });
    for (auto& t : ts) t.join();
  }
  Runtime& operator[](int r) { return *runtimes_[r]; }
  int size() const { return static_cast<int>(runtimes_.size()); }

  // Runs fn(rank) on one thread per rank.
  void each(const std::function<void(int)>& fn) {
    std::vector<std::thread> ts;
    for (int r = 0; r < size(); ++r) ts.emplace_back(fn, r);
    for (auto& t : ts) t.join();
  }

 private:
  std::vector<std::unique_ptr<Runtime>> runtimes_;
  std::vector<std::unique_ptr<ops::Channel>> spare_;
};

inline Handle submit(Runtime& rt, Result<std::unique_ptr<Entry>> e) {
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  return rt.submit(std::move(*e));
}

inline Handle allreduce(Runtime& rt, const std::string& name, std::vector<float>& v,
                        AllreduceOptions opts = {}) {
  auto view = view_of(v.data(), {static_cast<int64_t>(v.size())});
  return submit(rt, build_allreduce(name, view, view, opts));
}

}  // namespace kolo::coord::testkit
