#include "tools/kolorun/elastic_supervisor.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <deque>
#include <map>
#include <optional>

#include "tools/kolorun/child_process.h"
#include "tools/kolorun/elastic_driver.h"
#include "tools/kolorun/elastic_nodes.h"

namespace kolo::kolorun {
namespace {

using Clock = std::chrono::steady_clock;

// The poll's timeout: how late the driver may see a re-form request or a ready key (Note
// [Elastic supervision loop]).
constexpr std::chrono::milliseconds kTurn{10};

struct WorkerProc {
  Child child;
  bool stopping = false;                     // kolorun sent SIGTERM: leaving, not failing
  std::optional<Clock::time_point> kill_at;  // SIGKILL then, if still alive
};

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
  void on_node_lost(int node);
  void on_node_joined(int node);
  void stop_remote_workers();
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
  std::optional<NodeRoster> roster_;    // node 0 of several
  std::map<int64_t, int> worker_node_;  // node 0 of several: the node of each worker
  std::optional<NodeLink> link_;        // any other node
  std::optional<int> over_code_;        // any other node: the job is over for it, so
  Clock::time_point word_read_{};       // any other node: node 0's word last read
  bool node0_lost_ = false;
};

Status ElasticSupervisor::start() {
  if (follower()) {
    if (o_.node_rank >= o_.nnodes) return link_->register_late(o_.initial_workers);
    return Status::Ok();
  }
  if (roster_) return start_nodes();
  std::vector<std::pair<int64_t, std::string>> workers;
  for (int w = 0; w < o_.initial_workers; ++w) workers.emplace_back(w, o_.host);
  KOLO_RETURN_IF_ERROR(driver_.start(workers));
  for (int w = 0; w < o_.initial_workers; ++w) {
    Status s = spawn_worker(w);
    if (!s.ok()) {
      for (WorkerProc& p : procs_) signal_group(p.child, SIGKILL);
      for (WorkerProc& p : procs_) ::waitpid(p.child.pid, nullptr, 0);
      return s;
    }
  }
  next_id_ = target_ = o_.initial_workers;
  return Status::Ok();
}

Status ElasticSupervisor::spawn_worker(int64_t id) {
  RankSpec spec = o_.worker;
  spec.rank = static_cast<int>(id);
  spec.role = "worker";
  spec.cpus.clear();
  spec.env["KOLO_ELASTIC_WORKER"] = std::to_string(id);
  procs_.emplace_back();
  Status s = spawn(spec, o_.tag_output, stdout_sink_, stderr_sink(), procs_.back().child);
  if (!s.ok()) procs_.pop_back();
  return s;
}

void ElasticSupervisor::start_new_worker() {
  const int64_t id = next_id_++;
  driver_.add_worker(id, o_.host);
  Status s = spawn_worker(id);
  if (s.ok()) return;
  say(s.message());
  driver_.on_exit(id, /*clean=*/false, "could not start", /*stopped=*/false);
}

int ElasticSupervisor::alive_count() const {
  return static_cast<int>(std::count_if(procs_.begin(), procs_.end(),
                                        [](const WorkerProc& p) { return p.child.alive; }));
}

int ElasticSupervisor::active_count() const {
  return static_cast<int>(std::count_if(procs_.begin(), procs_.end(), [](const WorkerProc& p) {
    return p.child.alive && !p.stopping;
  }));
}

void ElasticSupervisor::stop_worker(WorkerProc& p, Clock::time_point now) {
  if (!p.child.alive || p.stopping) return;
  p.stopping = true;
  p.kill_at = now + o_.grace;
  signal_group(p.child, SIGTERM);
}

void ElasticSupervisor::run() {
  while (true) {
    reap();
    const auto now = Clock::now();
    if (follower()) {
      follow(now);
    } else {
      if (roster_) poll_nodes(now);
      apply_discovery();
      drive(now);
    }
    enforce_deadlines(now);
    if (done_draining(now)) return;
    poll_and_dispatch();
  }
}

void ElasticSupervisor::reap() {
  for (WorkerProc& p : procs_) {
    if (!p.child.alive) continue;
    int status = 0;
    if (::waitpid(p.child.pid, &status, WNOHANG) != p.child.pid) continue;
    p.child.alive = false;
    p.child.status = status;
    on_reaped(p);
  }
}

void ElasticSupervisor::on_reaped(WorkerProc& p) {
  const int64_t id = p.child.rank;
  const std::string how = exit_text(p.child.status);
  const bool clean = !failed(p.child.status);
  if (o_.on_exit) o_.on_exit(id, how);
  if (follower()) {
    if (!node0_lost_) {
      if (Status s = link_->report({id, clean, p.stopping, how}); !s.ok()) lose_node0(s);
    }
    if (!clean && !p.stopping && !interrupted_by_)
      say("worker " + std::to_string(id) + " (pid " + std::to_string(p.child.pid) + ") " + how);
    return;
  }
  driver_.on_exit(id, clean, how, p.stopping);
  // Once the job has ended, every worker leaving is expected; the end message said why.
  if (clean || p.stopping || driver_.end_message() || interrupted_by_) return;
  std::string line =
      "worker " + std::to_string(id) + " (pid " + std::to_string(p.child.pid) + ") " + how;
  if (o_.elastic.respawn && driver_.may_start_on(o_.host)) {
    say(line + "; starting worker " + std::to_string(next_id_) + " in its place");
    start_new_worker();
    return;
  }
  if (driver_.blacklisted(o_.host))
    line += "; host " + o_.host +
            " gets no new workers: " + std::to_string(o_.elastic.blacklist_after) +
            " of its workers failed (--blacklist-after " +
            std::to_string(o_.elastic.blacklist_after) + ")";
  say(line);
}

void ElasticSupervisor::apply_discovery() {
  if (!o_.discovery) return;
  std::optional<Result<std::vector<HostSlots>>> found = o_.discovery->take();
  if (!found) return;
  if (!found->ok()) {
    // Said once while it lasts: a script that stays broken must not flood the output.
    const std::string& why = found->status().message();
    if (found->status().code() != StatusCode::kAborted && why != last_discovery_warning_)
      say("warning: " + why + "; the workers stay as they are");
    last_discovery_warning_ = why;
    return;
  }
  last_discovery_warning_.clear();
  const LocalShare share = local_share(**found, o_.host);
  if (!share.other_hosts.empty() && !warned_other_hosts_) {
    warned_other_hosts_ = true;
    say("warning: the discovery script lists other hosts (" + join_and(share.other_hosts) +
        "): kolorun cannot start ranks on other hosts yet; it uses this host's slots only");
  }
  const int want = std::min(share.slots, o_.elastic.max_np);
  if (want < o_.elastic.min_np && target_ != o_.elastic.min_np)
    say("warning: the discovery script lists " + std::to_string(share.slots) +
        " slots on this host, fewer than --min-np " + std::to_string(o_.elastic.min_np) +
        ": keeping " + std::to_string(o_.elastic.min_np) + " workers");
  target_ = std::max(want, o_.elastic.min_np);
  follow_target();
}

void ElasticSupervisor::follow_target() {
  // A finishing job's ranks are done training: slots no longer matter.
  if (driver_.end_message() || driver_.finishing() || interrupted_by_) return;
  int active = active_count();
  while (active < target_ && driver_.may_start_on(o_.host)) {
    start_new_worker();
    ++active;
  }
  const auto now = Clock::now();
  for (auto it = procs_.rbegin(); it != procs_.rend() && active > target_; ++it) {
    if (!it->child.alive || it->stopping) continue;
    say("stopping worker " + std::to_string(it->child.rank) + ": the discovery script lists " +
        std::to_string(target_) + " slots on this host");
    stop_worker(*it, now);
    --active;
  }
}

void ElasticSupervisor::drive(Clock::time_point now) {
  if (Status s = driver_.step(now); !s.ok())
    (void)driver_.end("kolorun: lost its own store, the job cannot go on: " + s.message());
  const elastic_protocol::Plan& plan = driver_.plan();
  if (plan.generation > generation_said_) {
    generation_said_ = plan.generation;
    say("generation " + std::to_string(plan.generation) + ": " + std::to_string(plan.size()) +
        (plan.size() == 1 ? " rank, worker " : " ranks, workers ") + plan.workers_text());
  }
  if (driver_.end_message() && !end_said_) {
    end_said_ = true;
    stderr_sink().write(*driver_.end_message() + "\n");
    end_term_at_ = now + o_.grace;
  }
  if (driver_.finished() && !finished_stop_sent_) {
    // Every rank is done: workers still waiting to join have nothing to join.
    finished_stop_sent_ = true;
    for (WorkerProc& p : procs_) stop_worker(p, now);
    stop_remote_workers();
  }
}

void ElasticSupervisor::enforce_deadlines(Clock::time_point now) {
  if (end_term_at_ && now >= *end_term_at_) {
    end_term_at_.reset();
    if (alive_count() > 0)
      say("stopping the " + std::to_string(alive_count()) +
          " worker(s) still running (SIGTERM, then SIGKILL after " +
          std::to_string(o_.grace.count()) + "ms)");
    for (WorkerProc& p : procs_) stop_worker(p, now);
  }
  for (WorkerProc& p : procs_) {
    if (!p.child.alive || !p.kill_at || now < *p.kill_at) continue;
    say("worker " + std::to_string(p.child.rank) + " (pid " + std::to_string(p.child.pid) +
        ") did not stop within the grace period; sending SIGKILL");
    signal_group(p.child, SIGKILL);
    p.kill_at.reset();
  }
}

bool ElasticSupervisor::done_draining(Clock::time_point now) {
  if (alive_count() > 0) return false;
  // Workers on other nodes still count; a follower waits for node 0's word even without any.
  if (!follower() && driver_.live_count() > 0) return false;
  if (follower() && !over_code_ && !interrupted_by_) return false;
  bool pipes_open = false;
  for (const WorkerProc& p : procs_) pipes_open |= p.child.out_fd >= 0 || p.child.err_fd >= 0;
  if (!pipes_open) return true;
  if (!drain_until_) {
    // What the workers left in their groups holds the pipes.
    for (WorkerProc& p : procs_) signal_group(p.child, SIGKILL);
    drain_until_ = now + std::chrono::seconds(1);
  }
  if (now < *drain_until_) return false;
  for (WorkerProc& p : procs_) {
    for (int* fd : {&p.child.out_fd, &p.child.err_fd})
      if (*fd >= 0) ::close(*fd), *fd = -1;
    if (p.child.out) p.child.out->finish();
    if (p.child.err) p.child.err->finish();
  }
  return true;
}

void ElasticSupervisor::poll_and_dispatch() {
  std::vector<pollfd> fds;
  fds.push_back({signal_pipe_fd(), POLLIN, 0});
  for (OutputSink* sink : sinks_)
    if (sink->wants_write()) fds.push_back({sink->fd(), POLLOUT, 0});
  const size_t first_pipe = fds.size();
  for (const WorkerProc& p : procs_) {  // a full sink's pipes wait (output_sink.h)
    if (p.child.out_fd >= 0 && !stdout_sink_.full()) fds.push_back({p.child.out_fd, POLLIN, 0});
    if (p.child.err_fd >= 0 && !stderr_sink().full()) fds.push_back({p.child.err_fd, POLLIN, 0});
  }
  ::poll(fds.data(), fds.size(), static_cast<int>(kTurn.count()));
  if (fds[0].revents & POLLIN) handle_signals();
  for (WorkerProc& p : procs_) {
    for (size_t k = first_pipe; k < fds.size(); ++k) {
      if (!(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      if (fds[k].fd == p.child.out_fd && !stdout_sink_.full())
        pump(p.child.out_fd, *p.child.out);
      else if (fds[k].fd == p.child.err_fd && !stderr_sink().full())
        pump(p.child.err_fd, *p.child.err);
    }
  }
  for (OutputSink* sink : sinks_) sink->flush();
}

void ElasticSupervisor::handle_signals() {
  unsigned char sigs[64];
  ssize_t n;
  while ((n = ::read(signal_pipe_fd(), sigs, sizeof sigs)) > 0) {
    for (ssize_t k = 0; k < n; ++k) {
      const int sig = sigs[k];
      if (sig == SIGCHLD) continue;
      if (interrupted_by_) {
        say("got " + signal_name(sig) + " again; sending SIGKILL to every worker");
        for (WorkerProc& p : procs_) signal_group(p.child, SIGKILL);
        continue;
      }
      interrupted_by_ = sig;
      say("got " + signal_name(sig) + "; forwarding it to " + std::to_string(alive_count()) +
          " worker(s)");
      // The workers waiting in the rendezvous end with this instead of waiting for a world. A
      // follower's workers just leave the world: node 0 re-forms it without them.
      end_said_ = true;
      if (!follower())
        (void)driver_.end("kolorun: interrupted by " + signal_name(sig) + "; the job ends");
      const auto now = Clock::now();
      for (WorkerProc& p : procs_) {
        if (!p.child.alive) continue;
        p.stopping = true;
        p.kill_at = now + o_.grace;
        signal_group(p.child, sig == SIGHUP ? SIGTERM : sig);
      }
    }
  }
}

int ElasticSupervisor::finish() {
  for (WorkerProc& p : procs_) signal_group(p.child, SIGKILL);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) ::signal(s, SIG_DFL);
  close_signal_pipe();
  const int code = interrupted_by_ ? 128 + interrupted_by_
                   : follower()    ? over_code_.value_or(1)
                                   : (driver_.succeeded() ? 0 : 1);
  if (follower() && !node0_lost_) link_->done();
  if (roster_) {
    // The other nodes' kolorun read the end from the store: keep serving it until they left.
    if (Status s = roster_->finish(code, o_.grace + kNodeLossBound); !s.ok())
      say("warning: " + s.message());
  }
  flush_at_exit(sinks_, interrupted_by_ != 0);
  return code;
}

// ---- Node 0 of several (Note [Elastic nodes]) --------------------------------------------

Status ElasticSupervisor::start_nodes() {
  KOLO_RETURN_IF_ERROR(roster_->add_initial(o_.nnodes, o_.initial_workers, Clock::now()));
  // Worker ids node by node, as a fixed job numbers its ranks: node K holds K*np .. K*np+np-1.
  std::vector<std::pair<int64_t, std::string>> workers;
  for (int k = 0; k < o_.nnodes; ++k) {
    for (int w = 0; w < o_.initial_workers; ++w) {
      const int64_t id = int64_t{k} * o_.initial_workers + w;
      workers.emplace_back(id, roster_->name_of(k));
      worker_node_[id] = k;
    }
  }
  KOLO_RETURN_IF_ERROR(driver_.start(workers));
  next_id_ = static_cast<int64_t>(workers.size());
  target_ = o_.initial_workers;
  for (const auto& [id, host] : workers) {
    const int node = worker_node_[id];
    Status s = node == 0 ? spawn_worker(id) : roster_->order(node, {true, id});
    if (!s.ok()) {
      for (WorkerProc& p : procs_) signal_group(p.child, SIGKILL);
      for (WorkerProc& p : procs_) ::waitpid(p.child.pid, nullptr, 0);
      return s;
    }
  }
  return Status::Ok();
}

void ElasticSupervisor::start_remote_worker(int node) {
  const int64_t id = next_id_++;
  driver_.add_worker(id, roster_->name_of(node));
  worker_node_[id] = node;
  if (Status s = roster_->order(node, {true, id}); !s.ok()) {
    say("cannot order worker " + std::to_string(id) + " on node " + std::to_string(node) + ": " +
        s.message());
    driver_.on_exit(id, /*clean=*/false, "could not start", /*stopped=*/false);
  }
}

void ElasticSupervisor::poll_nodes(Clock::time_point now) {
  if (driver_.end_message() && driver_.live_count() == 0) return;
  Result<NodeRoster::News> news = roster_->poll(now);
  if (!news.ok()) {
    (void)driver_.end("kolorun: lost its own store, the job cannot go on: " +
                      news.status().message());
    return;
  }
  for (const auto& [node, e] : news->exits) on_remote_exit(node, e);
  for (int node : news->lost) on_node_lost(node);
  for (int node : news->joined) on_node_joined(node);
}

void ElasticSupervisor::on_remote_exit(int node, const NodeEvent& e) {
  driver_.on_exit(e.worker, e.clean, e.how, e.stopped);
  if (e.clean || e.stopped || driver_.end_message() || interrupted_by_) return;
  const std::string& name = roster_->name_of(node);
  std::string line = "worker " + std::to_string(e.worker) + " on node " + std::to_string(node) +
                     " (host " + name + ") " + e.how;
  if (o_.elastic.respawn && driver_.may_start_on(name)) {
    say(line + "; starting worker " + std::to_string(next_id_) + " on that node in its place");
    start_remote_worker(node);
    return;
  }
  say(line);
}

void ElasticSupervisor::on_node_lost(int node) {
  const std::string& host = roster_->nodes().at(node).host;
  const std::string how = "lost with node " + std::to_string(node) + " (host " + host + ")";
  std::vector<std::string> lost;
  for (const auto& [id, k] : worker_node_) {
    const std::optional<WorkerState> state = driver_.state_of(id);
    if (k != node || !state || *state == WorkerState::kExited) continue;
    lost.push_back(std::to_string(id));
    if (o_.on_exit) o_.on_exit(id, how);
    driver_.on_exit(id, /*clean=*/false, how, /*stopped=*/false);
  }
  const std::string why = "node " + std::to_string(node) + " (host " + host +
                          ") lost: no heartbeat for " + std::to_string(kNodeLossBound.count()) +
                          "ms";
  say(why + (lost.empty() ? std::string("; it had no workers")
                          : "; its worker(s) " + join_and(lost) + " are lost with it"));
  (void)roster_->give_up(node, "kolorun: node 0 gave this node up: " + why);
}

void ElasticSupervisor::on_node_joined(int node) {
  const NodeRoster::Node& n = roster_->nodes().at(node);
  int started = 0;
  while (started < n.np && driver_.may_start_on(n.name)) {
    start_remote_worker(node);
    ++started;
  }
  say("node " + std::to_string(node) + " (host " + n.host + ") joined offering " +
      std::to_string(n.np) + " worker(s); starting " + std::to_string(started) +
      (started < n.np ? " (--max-np " + std::to_string(o_.elastic.max_np) + ")" : ""));
}

void ElasticSupervisor::stop_remote_workers() {
  if (!roster_) return;
  for (const auto& [id, node] : worker_node_) {
    const std::optional<WorkerState> state = driver_.state_of(id);
    if (node == 0 || !state || *state == WorkerState::kExited) continue;
    if (!roster_->nodes().at(node).lost) (void)roster_->order(node, {false, id});
  }
}

// ---- Any other node ---------------------------------------------------------------------------

void ElasticSupervisor::follow(Clock::time_point now) {
  if (node0_lost_) return;
  Status s = link_->beat(now);
  Result<std::vector<NodeOrder>> orders =
      s.ok() ? link_->take_orders() : Result<std::vector<NodeOrder>>(s);
  if (!orders.ok()) return lose_node0(orders.status());
  on_orders(*orders, now);
  if (now - word_read_ >= kBeatEvery) {
    word_read_ = now;
    follow_word(now);
  }
}

void ElasticSupervisor::on_orders(const std::vector<NodeOrder>& orders, Clock::time_point now) {
  for (const NodeOrder& order : orders) {
    if (over_code_ || interrupted_by_) break;
    if (!order.start) {
      for (WorkerProc& p : procs_)
        if (p.child.rank == order.worker) stop_worker(p, now);
      continue;
    }
    if (Status s = spawn_worker(order.worker); !s.ok()) {
      say(s.message());
      if (Status r = link_->report({order.worker, false, false, "could not start"}); !r.ok())
        return lose_node0(r);
    }
  }
}

void ElasticSupervisor::follow_word(Clock::time_point now) {
  Result<NodeLink::Word> word = link_->read_word();
  if (!word.ok()) return lose_node0(word.status());
  if (word->end && !end_said_) {
    end_said_ = true;
    stderr_sink().write(*word->end + "\n");
    end_term_at_ = now + o_.grace;
  }
  if (word->lost && !over_code_) {
    say(*word->lost + "; stopping this node's workers");
    over_code_ = 1;
    stop_all(now);
  }
  if (word->over && !over_code_) {
    over_code_ = *word->over;
    stop_all(now);
  }
}

void ElasticSupervisor::lose_node0(const Status& why) {
  if (node0_lost_) return;
  node0_lost_ = true;
  if (!over_code_) over_code_ = 1;
  if (interrupted_by_) return;
  say("lost node 0's store (" + why.message() +
      "): node 0's kolorun, which drives the elastic job, is gone; the job cannot go on; "
      "stopping this node's workers");
  stop_all(Clock::now());
}

void ElasticSupervisor::stop_all(Clock::time_point now) {
  for (WorkerProc& p : procs_) stop_worker(p, now);
}

}  // namespace

Result<int> supervise_elastic(const ElasticSuperviseOptions& options) {
  ElasticSupervisor supervisor(options);
  KOLO_RETURN_IF_ERROR(install_signal_pipe());
  KOLO_RETURN_IF_ERROR(supervisor.start());
  supervisor.run();
  return supervisor.finish();
}

}  // namespace kolo::kolorun
