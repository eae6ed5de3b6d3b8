#include "tools/kolorun/elastic_supervisor.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

#include "tools/kolorun/elastic_supervisor_loop.h"

namespace kolo::kolorun {
namespace elastic_loop {

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
  if (roster_) return apply_node_discovery(**found);
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
  // SIGKILL, not stop_worker(): a stopped process ignores SIGTERM until continued, and a stuck
  // worker's end counts as a failure (Note [kolorun's generations]: "Stuck").
  for (int64_t id : driver_.take_stuck()) {
    say("stopping worker " + std::to_string(id) +
        ": rank 0 gave up on it (stuck past KOLO_STALL_SHUTDOWN_TIME)");
    bool here = false;
    for (WorkerProc& p : procs_)
      if (p.child.alive && p.child.rank == id) {
        signal_group(p.child, SIGKILL);
        here = true;
      }
    // Another node's: its kolorun stops it (SIGTERM, SIGKILL after the grace period).
    auto on = worker_node_.find(id);
    if (!here && roster_ && on != worker_node_.end() && on->second != 0)
      (void)roster_->order(on->second, {false, id});
  }
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

}  // namespace elastic_loop

Result<int> supervise_elastic(const ElasticSuperviseOptions& options) {
  elastic_loop::ElasticSupervisor supervisor(options);
  KOLO_RETURN_IF_ERROR(install_signal_pipe());
  KOLO_RETURN_IF_ERROR(supervisor.start());
  supervisor.run();
  return supervisor.finish();
}

}  // namespace kolo::kolorun
