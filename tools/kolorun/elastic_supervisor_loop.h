// The loop behind supervise_elastic() (elastic_supervisor.h), shared by its two files:
// elastic_supervisor.cc (one node, and what every node does) and elastic_supervisor_nodes.cc
// (Note [Elastic nodes]: node 0 driving the others, any other node following it). Internal to
// kolorun; include nowhere else.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "tools/kolorun/child_process.h"
#include "tools/kolorun/elastic_driver.h"
#include "tools/kolorun/elastic_nodes.h"
#include "tools/kolorun/elastic_supervisor.h"
#include "tools/kolorun/output_sink.h"

namespace kolo::kolorun::elastic_loop {

using Clock = std::chrono::steady_clock;

// The poll's timeout: how late the driver may see a re-form request or a ready key (Note
// [Elastic supervision loop]).
inline constexpr std::chrono::milliseconds kTurn{10};

struct WorkerProc {
  Child child;
  bool stopping = false;                     // kolorun sent SIGTERM: leaving, not failing
  std::optional<Clock::time_point> kill_at;  // SIGKILL then, if still alive
};

// One per kolorun process, on the thread that lives as long as it (it reaps, and reads the
// signal pipe of supervisor.h); not thread-safe. The options, and the store and discovery they
// name, must outlive it.
class ElasticSupervisor {
 public:
  explicit ElasticSupervisor(const ElasticSuperviseOptions& options)
      : o_(options),
        driver_(*options.store, DriverOptions{.min_np = options.elastic.min_np,
                                              .max_np = options.elastic.max_np,
                                              .blacklist_after = options.elastic.blacklist_after}) {
    if (!same_file(1, 2)) own_stderr_.emplace(2);
    warned_other_hosts_ = options.warned_other_hosts;
    sinks_ = {&stdout_sink_};
    if (own_stderr_) sinks_.push_back(&*own_stderr_);
    if (options.several_nodes && options.node_rank == 0)
      roster_.emplace(*options.store, options.host, options.initial_workers);
    if (options.several_nodes && options.node_rank > 0)
      link_.emplace(*options.store, options.node_rank);
  }

  // Publishes generation 0 and starts its workers; when one cannot start, kills and reaps
  // those already started.
  Status start();
  // Runs the loop of Note [Elastic supervision loop] until no worker is left.
  void run();
  // Restores the default signal actions, flushes kolorun's output and returns its exit status.
  int finish();

 private:
  OutputSink& stderr_sink() { return own_stderr_ ? *own_stderr_ : stdout_sink_; }
  void say(const std::string& line) { stderr_sink().write("kolorun: " + line + "\n"); }
  Status spawn_worker(int64_t id);
  // A worker after generation 0 (a replacement, a new slot); one that cannot start is reported
  // and counts as a failed worker of this host.
  void start_new_worker();
  int alive_count() const;
  int active_count() const;  // alive and not being stopped
  void stop_worker(WorkerProc& p, Clock::time_point now);
  void reap();
  void on_reaped(WorkerProc& p);
  void apply_discovery();
  // Starts or stops workers so that target_ are active.
  void follow_target();
  void drive(Clock::time_point now);
  void enforce_deadlines(Clock::time_point now);
  bool done_draining(Clock::time_point now);
  void poll_and_dispatch();
  void handle_signals();
  // Node 0 of several (Note [Elastic nodes]).
  Status start_nodes();
  void start_remote_worker(int node);
  void poll_nodes(Clock::time_point now);
  void on_remote_exit(int node, const NodeEvent& e);
  // `left`: its kolorun said it was leaving (interrupted) before its beat stopped.
  void on_node_lost(int node, bool left);
  void on_node_joined(int node);
  void stop_remote_workers();
  // The discovery script's list on node 0 of several: each node's workers follow its slots.
  void apply_node_discovery(const std::vector<HostSlots>& hosts);
  void follow_node_target(int node, int target);
  // Any other node: follows node 0's orders and word.
  void follow(Clock::time_point now);
  void follow_word(Clock::time_point now);
  void on_orders(const std::vector<NodeOrder>& orders, Clock::time_point now);
  void lose_node0(const Status& why);
  void stop_all(Clock::time_point now);
  bool follower() const { return link_.has_value(); }

  const ElasticSuperviseOptions& o_;
  ElasticDriver driver_;
  OutputSink stdout_sink_{1};
  std::optional<OutputSink> own_stderr_;
  std::vector<OutputSink*> sinks_;
  std::deque<WorkerProc> procs_;  // a deque: a worker's prefixers keep their address
  int64_t next_id_ = 0;
  int target_ = 0;  // workers wanted: -np, then the discovered slots within the bounds
  bool warned_other_hosts_ = false;
  std::string last_discovery_warning_;  // the failure of the last run, if it failed
  int interrupted_by_ = 0;
  bool end_said_ = false;
  std::optional<Clock::time_point> end_term_at_;  // ended: SIGTERM to whoever is left then
  bool finished_stop_sent_ = false;
  int64_t generation_said_ = 0;
  std::optional<Clock::time_point> drain_until_;
  std::optional<NodeRoster> roster_;                  // node 0 of several
  std::map<int64_t, int> worker_node_;                // node 0 of several: the node of each worker
  std::optional<std::vector<HostSlots>> last_hosts_;  // node 0 of several: discovered last
  std::set<int64_t> stop_ordered_;                    // node 0 of several: remote stops sent
  std::set<std::string> unclaimed_warned_;
  std::optional<NodeLink> link_;   // any other node
  std::optional<int> over_code_;   // any other node: the job is over for it, so
  Clock::time_point word_read_{};  // any other node: node 0's word last read
  bool node0_lost_ = false;
};

}  // namespace kolo::kolorun::elastic_loop
