#include "tools/kolorun/host_discovery.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <charconv>
#include <map>

#include "tools/kolorun/child_process.h"
#include "tools/kolorun/supervisor.h"

extern char** environ;

namespace kolo::kolorun {
namespace {

using Clock = std::chrono::steady_clock;

// A list of hosts is a few KiB; more is not a host list.
constexpr size_t kMaxOutput = 1 << 20;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

Status bad_line(const std::string& script, size_t number, std::string_view line,
                const std::string& expected) {
  return Status::InvalidArgument("--host-discovery-script " + script + " printed line " +
                                 std::to_string(number) + " '" + std::string(line) +
                                 "': expected " + expected);
}

// The script's output, its wait status; killed at the deadline or on `stop`.
struct ScriptRun {
  std::string output;
  int status = 0;
  bool timed_out = false, stopped = false, too_long = false;
};

Result<pid_t> spawn_script(const std::string& script, int out_fd) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
  posix_spawnattr_t attr;
  init_spawn_attributes(attr);  // a group of its own: killed with the helpers it runs
  char* argv[] = {const_cast<char*>(script.c_str()), nullptr};
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, script.c_str(), &fa, &attr, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0)
    return Status::IoError("--host-discovery-script " + script +
                           ": cannot run it: " + strerror(rc));
  return pid;
}

// Reads the script's stdout to its end, then reaps it; past the deadline (or on stop) kills
// its group first. The reaping is by pid: SIGCHLD is the supervision loop's, which reaps only
// its own workers' pids.
Result<ScriptRun> run_script(const std::string& script, std::chrono::milliseconds timeout,
                             const std::atomic<bool>* stop) {
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0)
    return Status::IoError(std::string("kolorun: pipe: ") + strerror(errno));
  auto pid = spawn_script(script, out[1]);
  ::close(out[1]);
  if (!pid.ok()) {
    ::close(out[0]);
    return pid.status();
  }
  ScriptRun run;
  const auto deadline = Clock::now() + timeout;
  bool killed = false;
  auto kill_group = [&](bool& why) {
    why = true;
    killed = true;
    ::kill(-*pid, SIGKILL);
  };
  while (true) {
    if (!killed && stop && *stop) kill_group(run.stopped);
    if (!killed && Clock::now() >= deadline) kill_group(run.timed_out);
    pollfd p{out[0], POLLIN, 0};
    if (::poll(&p, 1, 20) <= 0) continue;
    char buf[4096];
    const ssize_t n = ::read(out[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    run.output.append(buf, static_cast<size_t>(n));
    if (run.output.size() > kMaxOutput && !killed) kill_group(run.too_long);
  }
  ::close(out[0]);
  // Its stdout is closed, but it may linger: bounded by the same deadline.
  while (::waitpid(*pid, &run.status, WNOHANG) == 0) {
    if (!killed && (Clock::now() >= deadline || (stop && *stop)))
      kill_group(stop && *stop ? run.stopped : run.timed_out);
    ::usleep(2000);
  }
  if (!killed) ::kill(-*pid, SIGKILL);  // whatever it left running in its group
  return run;
}

}  // namespace

Result<std::vector<HostSlots>> parse_hosts(std::string_view output, const std::string& script) {
  std::vector<HostSlots> hosts;
  std::map<std::string, size_t> first_line;
  size_t number = 0;
  for (size_t i = 0; i < output.size();) {
    size_t j = output.find('\n', i);
    if (j == std::string_view::npos) j = output.size();
    const std::string_view raw = output.substr(i, j - i);
    i = j + 1;
    ++number;
    const std::string_view line = trim(raw);
    if (line.empty()) continue;
    constexpr const char* kForm = "'host:slots' or 'host' (slots an integer >= 0)";
    const size_t colon = line.find(':');
    const std::string_view host = line.substr(0, colon);
    if (host.empty() || host.find_first_of(" \t") != std::string_view::npos)
      return bad_line(script, number, raw, kForm);
    HostSlots h{std::string(host), 1};
    if (colon != std::string_view::npos) {
      const std::string_view n = line.substr(colon + 1);
      auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), h.slots);
      if (n.empty() || ec != std::errc() || end != n.data() + n.size() || h.slots < 0)
        return bad_line(script, number, raw, kForm);
    }
    auto [seen, fresh] = first_line.emplace(h.host, number);
    if (!fresh)
      return bad_line(script, number, raw,
                      "each host once (" + h.host + " is named on line " +
                          std::to_string(seen->second) + " too)");
    hosts.push_back(std::move(h));
  }
  return hosts;
}

Result<std::vector<HostSlots>> run_discovery(const std::string& script,
                                             std::chrono::milliseconds timeout,
                                             const std::atomic<bool>* stop) {
  KOLO_ASSIGN_OR_RETURN(ScriptRun run, run_script(script, timeout, stop));
  const std::string name = "--host-discovery-script " + script;
  if (run.stopped) return Status::Aborted(name + ": stopped (kolorun is exiting)");
  if (run.timed_out)
    return Status::Timeout(name + " did not finish within " + std::to_string(timeout.count()) +
                           " ms (--discovery-timeout); killed it");
  if (run.too_long)
    return Status::InvalidArgument(name + " printed more than " + std::to_string(kMaxOutput) +
                                   " bytes: expected one host:slots line per host");
  if (!WIFEXITED(run.status) || WEXITSTATUS(run.status) != 0)
    return Status::InvalidArgument(name + " " + exit_text(run.status) +
                                   ": expected exit status 0 and one host:slots line per host");
  return parse_hosts(run.output, script);
}

std::string this_hostname() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

LocalShare local_share(const std::vector<HostSlots>& hosts, const std::string& hostname) {
  const std::string short_name = hostname.substr(0, hostname.find('.'));
  LocalShare share;
  for (const HostSlots& h : hosts) {
    if (h.host == "localhost" || h.host == "127.0.0.1" || h.host == hostname ||
        h.host == short_name)
      share.slots += h.slots;
    else
      share.other_hosts.push_back(h.host);
  }
  return share;
}

HostDiscovery::HostDiscovery(std::string script, std::chrono::milliseconds interval,
                             std::chrono::milliseconds timeout)
    : script_(std::move(script)), interval_(interval), timeout_(timeout) {
  thread_ = std::thread([this] { run(); });
}

HostDiscovery::~HostDiscovery() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

std::optional<Result<std::vector<HostSlots>>> HostDiscovery::take() {
  MutexLock lock(mu_);
  std::optional<Result<std::vector<HostSlots>>> out = std::move(latest_);
  latest_.reset();
  return out;
}

void HostDiscovery::run() {
  while (true) {
    {
      MutexLock lock(mu_);
      wake_.wait_for(lock.native(), interval_, [this] { return stop_.load(); });
      if (stop_) return;
    }
    auto hosts = run_discovery(script_, timeout_, &stop_);
    if (stop_) return;
    MutexLock lock(mu_);
    latest_ = std::move(hosts);
  }
}

}  // namespace kolo::kolorun
