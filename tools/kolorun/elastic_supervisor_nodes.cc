// supervise_elastic() on several nodes (Note [Elastic nodes] in elastic_nodes.h): node 0
// ordering workers on the others and hearing of their ends, any other node following it.
#include <signal.h>
#include <sys/wait.h>

#include "tools/kolorun/elastic_supervisor_loop.h"

namespace kolo::kolorun::elastic_loop {

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
  for (int node : news->lost) on_node_lost(node, /*left=*/false);
  for (int node : news->left) on_node_lost(node, /*left=*/true);
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

void ElasticSupervisor::on_node_lost(int node, bool left) {
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
  const std::string why =
      "node " + std::to_string(node) + " (host " + host +
      (left ? ") left: its kolorun stopped"
            : ") lost: no heartbeat for " + std::to_string(kNodeLossBound.count()) + "ms");
  say(why + (lost.empty() ? std::string("; it had no workers")
                          : "; its worker(s) " + join_and(lost) + " are lost with it"));
  (void)roster_->give_up(node, "kolorun: node 0 gave this node up: " + why);
}

void ElasticSupervisor::on_node_joined(int node) {
  const NodeRoster::Node& n = roster_->nodes().at(node);
  if (o_.discovery) {
    say("node " + std::to_string(node) + " (host " + n.host + ") joined; it gets workers when " +
        "the discovery script lists it as " + n.name);
    if (last_hosts_) apply_node_discovery(*last_hosts_);
    return;
  }
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

void ElasticSupervisor::apply_node_discovery(const std::vector<HostSlots>& hosts) {
  last_hosts_ = hosts;
  if (driver_.end_message() || driver_.finishing() || interrupted_by_) return;
  const NodeTargets t = node_targets(hosts, roster_->nodes(), o_.elastic.max_np);
  for (const std::string& host : t.unclaimed) {
    if (!unclaimed_warned_.insert(host).second) continue;
    say("warning: the discovery script lists " + host +
        ", where no kolorun of this job runs: start kolorun there with --node-rank K >= --nnodes " +
        std::to_string(o_.nnodes) + " (and this job's flags) for it to get workers");
  }
  if (t.total < o_.elastic.min_np) {
    const std::string why = "the discovery script lists " + std::to_string(t.listed) +
                            " slots on this job's nodes, fewer than --min-np " +
                            std::to_string(o_.elastic.min_np);
    if (why != last_discovery_warning_) say("warning: " + why + "; the workers stay as they are");
    last_discovery_warning_ = why;  // said once while it lasts
    return;
  }
  for (const auto& [node, target] : t.workers)
    if (!roster_->nodes().at(node).lost) follow_node_target(node, target);
}

void ElasticSupervisor::follow_node_target(int node, int target) {
  const std::string& name = roster_->name_of(node);
  // This node's workers that are neither exited nor being stopped, oldest first.
  std::vector<int64_t> active;
  for (const auto& [id, k] : worker_node_) {
    const std::optional<WorkerState> state = driver_.state_of(id);
    if (k == node && state && *state != WorkerState::kExited && !stop_ordered_.count(id))
      active.push_back(id);
  }
  if (node == 0) {
    target_ = target;
    return follow_target();
  }
  for (int n = static_cast<int>(active.size()); n < target && driver_.may_start_on(name); ++n)
    start_remote_worker(node);
  for (int n = static_cast<int>(active.size()); n > target; --n) {
    const int64_t id = active[static_cast<size_t>(n - 1)];
    say("stopping worker " + std::to_string(id) + " on node " + std::to_string(node) +
        ": the discovery script lists " + std::to_string(target) + " slots for " + name);
    stop_ordered_.insert(id);
    (void)roster_->order(node, {false, id});
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

}  // namespace kolo::kolorun::elastic_loop
