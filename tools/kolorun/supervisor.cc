#include "tools/kolorun/supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>

#include "tools/kolorun/child_process.h"

namespace kolo::kolorun {
namespace {

using Clock = std::chrono::steady_clock;

// How long a failure by an error exit is held before kolorun reports it and stops the others
// (Note [Which rank kolorun names]).
constexpr std::chrono::milliseconds kSettle{250};

std::string describe_exit(const Child& c) {
  return "rank " + std::to_string(c.rank) + " (pid " + std::to_string(c.pid) + ") " +
         exit_text(c.status);
}

// One supervise() call: the ranks, kolorun's own output, and what has happened to the job so
// far. Lives on the thread that called supervise() (Note [Ranks die with kolorun]).
class Supervisor {
 public:
  explicit Supervisor(const SuperviseOptions& options) : options_(options) {
    // Note [kolorun output never blocks]. stdout and stderr share a sink when they are one
    // file (a closed fd 1 or 2 is /dev/null by now: kolorun's main).
    if (!same_file(1, 2)) own_stderr_.emplace(2);
    sinks_ = {&stdout_sink_};
    if (own_stderr_) sinks_.push_back(&*own_stderr_);
  }

  // The signal self-pipe and handlers; SIGPIPE ignored.
  Status install_signal_handlers();
  // Spawns every rank; when one cannot start, kills and reaps those already started.
  Status start(const std::vector<RankSpec>& ranks);
  // Runs the poll loop until every rank has exited and its pipes are drained (or given up on).
  void run();
  // Restores the default signal actions, flushes kolorun's output and returns its exit status.
  int finish();

 private:
  OutputSink& stderr_sink() { return own_stderr_ ? *own_stderr_ : stdout_sink_; }
  void say(const std::string& line) { stderr_sink().write("kolorun: " + line + "\n"); }
  int alive_count() const;
  void stop_others(int sig);

  // Reaps whoever has exited (SIGCHLD only wakes the loop; the truth is waitpid's), holds the
  // first failure (Note [Which rank kolorun names]), and tells on_exit.
  void reap();
  // Reports the held failure once it is due (or every rank has ended), unless an interruption
  // or another node's failure was reported meanwhile.
  void report_held_failure();
  // Names children_[i]'s failure (after the rank that left first, if that was another),
  // tells the other nodes, stops the ranks.
  void report_failure(size_t i);
  // Whether the loop is done: every rank reaped and its pipes closed, or the drain deadline
  // passed (what the ranks left behind holds a pipe). Starts the drain once all are reaped.
  bool done_draining(Clock::time_point now);
  // SIGKILL to the ranks still alive once the grace period after SIGTERM has passed.
  void enforce_grace(Clock::time_point now);
  // One poll() over the signal pipe, the remote failure fd, kolorun's output and the ranks'
  // pipes, then whatever it found ready.
  void poll_and_dispatch();
  void handle_signals();
  void handle_remote_failure();
  void pump_ready_pipes(const std::vector<pollfd>& fds, size_t first_pipe);

  const SuperviseOptions& options_;
  OutputSink stdout_sink_{1};
  std::optional<OutputSink> own_stderr_;
  std::vector<OutputSink*> sinks_;
  std::vector<Child> children_;

  uint64_t scans_ = 0;                  // waitpid scans so far
  std::optional<size_t> first_exit_;    // the first rank to end while others ran
  std::optional<size_t> held_failure_;  // the first failure, until reported (kSettle)
  std::optional<Clock::time_point> report_at_;
  std::optional<size_t> first_failure_;       // the failure reported; indices into children_
  int interrupted_by_ = 0;                    // the signal kolorun received, if any
  std::optional<Clock::time_point> kill_at_;  // when SIGKILL follows the SIGTERM
  bool killed_ = false;
  bool remote_failure_ = false;                   // another node reported a failure first
  std::optional<Clock::time_point> drain_until_;  // all reaped: wait this long for pipe EOFs
};

Status Supervisor::install_signal_handlers() { return install_signal_pipe(); }

Status Supervisor::start(const std::vector<RankSpec>& ranks) {
  children_.resize(ranks.size());
  for (size_t i = 0; i < ranks.size(); ++i) {
    Status s = spawn(ranks[i], options_.tag_output, stdout_sink_, stderr_sink(), children_[i]);
    if (!s.ok()) {
      signal_all(children_, SIGKILL);
      for (auto& c : children_)
        if (c.alive) ::waitpid(c.pid, nullptr, 0);
      return s;
    }
  }
  return Status::Ok();
}

int Supervisor::alive_count() const {
  int n = 0;
  for (const auto& c : children_) n += c.alive;
  return n;
}

void Supervisor::stop_others(int sig) {
  signal_all(children_, sig);
  if (!kill_at_) kill_at_ = Clock::now() + options_.grace;
}

void Supervisor::run() {
  while (true) {
    reap();
    report_held_failure();
    auto now = Clock::now();
    if (done_draining(now)) return;
    enforce_grace(now);
    poll_and_dispatch();
  }
}

void Supervisor::reap() {
  ++scans_;
  std::vector<size_t> ended;
  for (size_t i = 0; i < children_.size(); ++i) {
    Child& c = children_[i];
    if (!c.alive) continue;
    int status = 0;
    if (::waitpid(c.pid, &status, WNOHANG) != c.pid) continue;
    c.alive = false;
    c.status = status;
    c.scan = scans_;
    ended.push_back(i);
  }
  if (ended.empty()) return;
  // Note [Which rank kolorun names]: this scan's ranks in the order they count as ending.
  auto as_exit = [&](size_t i) {
    return RankExit{children_[i].rank, children_[i].status, children_[i].scan};
  };
  std::sort(ended.begin(), ended.end(),
            [&](size_t a, size_t b) { return ended_first(as_exit(a), as_exit(b)); });
  if (!first_exit_ && alive_count() > 0) first_exit_ = ended.front();
  // After an interruption or another node's failure, that was the job's first report.
  if (!held_failure_ && !first_failure_ && !interrupted_by_ && !remote_failure_) {
    auto failure = std::find_if(ended.begin(), ended.end(),
                                [&](size_t i) { return failed(children_[i].status); });
    if (failure != ended.end()) {
      held_failure_ = *failure;
      const bool signaled = WIFSIGNALED(children_[*failure].status);
      report_at_ = Clock::now() + (signaled ? Clock::duration::zero() : kSettle);
    }
  }
  // Only now: a Kolo rank that fails on a departed peer waits for this (Note [Departures]), and
  // must not end within this scan, where the order would be lost.
  if (options_.on_exit)
    for (size_t i : ended) options_.on_exit(children_[i].rank, exit_text(children_[i].status));
}

void Supervisor::report_held_failure() {
  if (held_failure_ && (interrupted_by_ || remote_failure_)) held_failure_.reset();
  if (!held_failure_ || (Clock::now() < *report_at_ && alive_count() > 0)) return;
  const size_t i = *held_failure_;
  held_failure_.reset();
  report_failure(i);
}

void Supervisor::report_failure(size_t i) {
  first_failure_ = i;
  std::string what = describe_exit(children_[i]);
  // A failure is held from the scan that found it on: an earlier first exit exited 0.
  if (first_exit_ && *first_exit_ != i)
    what = describe_exit(children_[*first_exit_]) +
           " while the other ranks still ran, the first rank to leave; then " + what;
  say(what);
  if (options_.on_failure) options_.on_failure(what);
  if (alive_count() > 0) {
    say("stopping the other ranks (SIGTERM, then SIGKILL after " +
        std::to_string(options_.grace.count()) + "ms)");
    stop_others(SIGTERM);
  }
}

bool Supervisor::done_draining(Clock::time_point now) {
  const int alive = alive_count();
  bool pipes_open = false;
  for (auto& c : children_) pipes_open |= (c.out_fd >= 0 || c.err_fd >= 0);
  if (alive == 0 && !pipes_open) return true;
  if (alive == 0 && !drain_until_) {
    signal_all(children_, SIGKILL);  // what the ranks left in their groups holds the pipes
    drain_until_ = now + std::chrono::seconds(1);
  }
  // Pipes left unread because the output is not being taken (a full sink) do not count as
  // a grandchild holding them, unless kolorun was interrupted: then the rest may go.
  bool held_back = false;
  for (auto& c : children_)
    held_back |= (c.out_fd >= 0 && stdout_sink_.full()) || (c.err_fd >= 0 && stderr_sink().full());
  if (drain_until_ && held_back && !interrupted_by_) drain_until_ = now + std::chrono::seconds(1);
  if (!drain_until_ || now < *drain_until_) return false;
  // A grandchild still holds a pipe open; stop reading so kolorun can report and exit.
  for (auto& c : children_) {
    for (int* fd : {&c.out_fd, &c.err_fd})
      if (*fd >= 0) ::close(*fd), *fd = -1;
    if (c.out) c.out->finish();
    if (c.err) c.err->finish();
  }
  return true;
}

void Supervisor::enforce_grace(Clock::time_point now) {
  if (!kill_at_ || killed_ || now < *kill_at_) return;
  for (auto& c : children_)
    if (c.alive)
      say("rank " + std::to_string(c.rank) + " (pid " + std::to_string(c.pid) +
          ") did not stop within the grace period; sending SIGKILL");
  signal_all(children_, SIGKILL);
  killed_ = true;
}

void Supervisor::poll_and_dispatch() {
  std::vector<pollfd> fds;
  fds.push_back({signal_pipe_fd(), POLLIN, 0});
  size_t remote_index = 0;
  if (options_.remote_failure_fd >= 0 && !remote_failure_) {
    remote_index = fds.size();
    fds.push_back({options_.remote_failure_fd, POLLIN, 0});
  }
  for (OutputSink* sink : sinks_)
    if (sink->wants_write()) fds.push_back({sink->fd(), POLLOUT, 0});
  // A full sink's pipes are not read (Note [kolorun output never blocks]).
  const size_t first_pipe = fds.size();
  for (auto& c : children_) {
    if (c.out_fd >= 0 && !stdout_sink_.full()) fds.push_back({c.out_fd, POLLIN, 0});
    if (c.err_fd >= 0 && !stderr_sink().full()) fds.push_back({c.err_fd, POLLIN, 0});
  }
  // Wake at least every 100 ms: a SIGCHLD that raced with the waitpid scan is then seen late
  // by at most that much, and the grace/drain deadlines are checked.
  int wait_ms = 100;
  ::poll(fds.data(), fds.size(), wait_ms);

  if (fds[0].revents & POLLIN) handle_signals();
  if (remote_index && (fds[remote_index].revents & POLLIN)) handle_remote_failure();
  pump_ready_pipes(fds, first_pipe);
  for (OutputSink* sink : sinks_) sink->flush();
}

void Supervisor::handle_signals() {
  unsigned char sigs[64];
  ssize_t n;
  while ((n = ::read(signal_pipe_fd(), sigs, sizeof sigs)) > 0) {
    for (ssize_t k = 0; k < n; ++k) {
      int sig = sigs[k];
      if (sig == SIGCHLD) continue;
      if (interrupted_by_) {
        say("got " + signal_name(sig) + " again; sending SIGKILL to every rank");
        signal_all(children_, SIGKILL);
        killed_ = true;
      } else {
        interrupted_by_ = sig;
        say("got " + signal_name(sig) + "; forwarding it to " + std::to_string(alive_count()) +
            " rank(s)");
        if (options_.on_failure && !first_failure_ && !remote_failure_)
          options_.on_failure("kolorun was interrupted by " + signal_name(sig));
        signal_all(children_, sig == SIGHUP ? SIGTERM : sig);
        if (!kill_at_) kill_at_ = Clock::now() + options_.grace;
      }
    }
  }
}

void Supervisor::handle_remote_failure() {
  char msg[4096];
  ssize_t n = ::read(options_.remote_failure_fd, msg, sizeof msg);
  remote_failure_ = true;
  if (first_failure_ || interrupted_by_) return;
  say(std::string(msg, static_cast<size_t>(std::max<ssize_t>(n, 0))));
  if (alive_count() > 0) {
    say("stopping this node's ranks (SIGTERM, then SIGKILL after " +
        std::to_string(options_.grace.count()) + "ms)");
    stop_others(SIGTERM);
  }
}

void Supervisor::pump_ready_pipes(const std::vector<pollfd>& fds, size_t first_pipe) {
  for (auto& c : children_) {
    for (size_t k = first_pipe; k < fds.size(); ++k) {
      if (!(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      // Checked again per pipe: one loop's reads overshoot kLimit by one read at most.
      if (fds[k].fd == c.out_fd && !stdout_sink_.full())
        pump(c.out_fd, *c.out);
      else if (fds[k].fd == c.err_fd && !stderr_sink().full())
        pump(c.err_fd, *c.err);
    }
  }
}

int Supervisor::finish() {
  // Every rank has exited; what they left running in their process groups goes with them.
  signal_all(children_, SIGKILL);
  // No rank is left to forward a signal to: from here on SIGINT/SIGTERM end kolorun itself,
  // whatever it does next (node 0 waiting for the other nodes, say).
  for (int s : {SIGINT, SIGTERM, SIGHUP}) ::signal(s, SIG_DFL);
  close_signal_pipe();
  flush_at_exit(sinks_, interrupted_by_ != 0);
  if (first_failure_) return exit_code_of(children_[*first_failure_].status);
  if (interrupted_by_) return 128 + interrupted_by_;
  if (remote_failure_) return 1;
  return 0;
}

}  // namespace

std::string signal_name(int sig) {
  if (const char* abbrev = sigabbrev_np(sig)) return std::string("SIG") + abbrev;
  return "signal " + std::to_string(sig);
}

std::string exit_text(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  const int sig = WTERMSIG(status);
  return "was killed by signal " + std::to_string(sig) + " (" + signal_name(sig) + ")";
}

bool ended_first(const RankExit& a, const RankExit& b) {
  if (a.scan != b.scan) return a.scan < b.scan;
  // 0: killed by a signal, 1: exited with an error, 2: exited 0.
  auto kind = [](int status) { return WIFSIGNALED(status) ? 0 : failed(status) ? 1 : 2; };
  if (kind(a.status) != kind(b.status)) return kind(a.status) < kind(b.status);
  return a.rank < b.rank;
}

Result<int> supervise(const std::vector<RankSpec>& ranks, const SuperviseOptions& options) {
  Supervisor supervisor(options);
  KOLO_RETURN_IF_ERROR(supervisor.install_signal_handlers());
  KOLO_RETURN_IF_ERROR(supervisor.start(ranks));
  supervisor.run();
  return supervisor.finish();
}

Status check_node_capacity(int ranks, bool tag_output) {
  const std::string np = "-np " + std::to_string(ranks);
  // Descriptors kolorun holds besides the pipes: stdio, the signal pipe, the store's sockets.
  constexpr uint64_t kMargin = 64;
  rlimit files{}, procs{};
  if (tag_output && ::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY) {
    const uint64_t needed = 2 * static_cast<uint64_t>(ranks) + kMargin;
    if (needed > files.rlim_cur)
      return Status::InvalidArgument(
          np + " needs about " + std::to_string(needed) +
          " file descriptors for the ranks' output, but kolorun may open " +
          std::to_string(files.rlim_cur) + " (ulimit -n); use fewer ranks, raise the limit, or " +
          "pass --no-tag-output");
  }
  if (::getrlimit(RLIMIT_NPROC, &procs) == 0 && procs.rlim_cur != RLIM_INFINITY &&
      static_cast<uint64_t>(ranks) >= procs.rlim_cur)
    return Status::InvalidArgument(np + " is more processes than this user may run (" +
                                   std::to_string(procs.rlim_cur) + ", ulimit -u)");
  std::ifstream pid_max_file("/proc/sys/kernel/pid_max");
  uint64_t pid_max = 0;
  if (pid_max_file >> pid_max && static_cast<uint64_t>(ranks) >= pid_max)
    return Status::InvalidArgument(np + " is more processes than this machine can number (" +
                                   "pid_max " + std::to_string(pid_max) + ")");
  return Status::Ok();
}

int exec_rank_main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "kolorun: usage: kolorun %s RANK PPID cmd args...\n", kExecRankFlag);
    return 2;
  }
  const pid_t parent = static_cast<pid_t>(std::atol(argv[3]));
  // Asked before the check, so that a parent dying in between is seen by one or the other.
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != parent) return 128 + SIGKILL;
  ::execvp(argv[4], argv + 4);
  std::fprintf(stderr, "kolorun: cannot start rank %s: %s: %s\n", argv[2], argv[4],
               strerror(errno));
  return 127;
}

}  // namespace kolo::kolorun
