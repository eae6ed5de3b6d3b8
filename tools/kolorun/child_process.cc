#include "tools/kolorun/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "tools/kolorun/cpu_binding.h"

namespace kolo::kolorun {
namespace {

using Clock = std::chrono::steady_clock;

// Once kolorun was interrupted, how long it still waits at exit for its output to be read.
constexpr std::chrono::seconds kFlushBound{2};

int g_signal_pipe[2] = {-1, -1};  // written by signal handlers, read by the poll loop

void on_signal(int sig) {
  int saved = errno;
  unsigned char b = static_cast<unsigned char>(sig);
  [[maybe_unused]] ssize_t n = ::write(g_signal_pipe[1], &b, 1);  // full pipe: a wake-up is queued
  errno = saved;
}

// The environment as "K=V" strings plus the char* array posix_spawn wants.
struct Envp {
  std::vector<std::string> strings;
  std::vector<char*> ptrs;
  explicit Envp(const std::map<std::string, std::string>& env) {
    for (const auto& [k, v] : env) strings.push_back(k + "=" + v);
    for (auto& s : strings) ptrs.push_back(s.data());
    ptrs.push_back(nullptr);
  }
};

// Whether the rank's command can be executed, searched like execvp does (in the rank's own
// PATH), so that a missing program fails before anything starts, naming rank and command.
Status check_runnable(const RankSpec& spec) {
  const std::string& cmd = spec.argv.at(0);
  auto fail = [&](int err) {
    return Status::IoError("cannot start " + spec.role + " " + std::to_string(spec.rank) + ": " +
                           cmd + ": " + strerror(err));
  };
  if (cmd.find('/') != std::string::npos)
    return ::access(cmd.c_str(), X_OK) == 0 ? Status::Ok() : fail(errno);
  auto path = spec.env.find("PATH");
  std::string dirs = path != spec.env.end() ? path->second : "/usr/local/bin:/usr/bin:/bin";
  for (size_t begin = 0; begin <= dirs.size();) {
    size_t end = dirs.find(':', begin);
    if (end == std::string::npos) end = dirs.size();
    std::string dir = dirs.substr(begin, end - begin);
    if (dir.empty()) dir.push_back('.');
    if (::access((dir + "/" + cmd).c_str(), X_OK) == 0) return Status::Ok();
    begin = end + 1;
  }
  return fail(ENOENT);
}

}  // namespace

Status install_signal_pipe() {
  if (::pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
    return Status::IoError(std::string("kolorun: pipe: ") + strerror(errno));
  struct sigaction sa = {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int s : {SIGINT, SIGTERM, SIGCHLD, SIGHUP}) ::sigaction(s, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);  // a closed stdout must not kill the supervisor
  return Status::Ok();
}

int signal_pipe_fd() { return g_signal_pipe[0]; }

void close_signal_pipe() {
  ::close(g_signal_pipe[0]);
  ::close(g_signal_pipe[1]);
}

bool failed(int status) { return !WIFEXITED(status) || WEXITSTATUS(status) != 0; }

int exit_code_of(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void init_spawn_attributes(posix_spawnattr_t& attr) {
  posix_spawnattr_init(&attr);
  sigset_t def, none;
  sigemptyset(&def);
  for (int s : {SIGINT, SIGTERM, SIGCHLD, SIGPIPE, SIGHUP}) sigaddset(&def, s);
  sigemptyset(&none);
  posix_spawnattr_setsigdefault(&attr, &def);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
}

Status spawn(const RankSpec& spec, bool tag, OutputSink& out_sink, OutputSink& err_sink,
             Child& child) {
  KOLO_RETURN_IF_ERROR(check_runnable(spec));
  // The child inherits this thread's affinity mask at spawn (posix_spawn has no attribute
  // for it); the guard restores ours afterwards.
  ScopedThreadAffinity affinity(spec.cpus);
  if (!affinity.status().ok())
    return affinity.status().with_context("cannot bind " + spec.role + " " +
                                          std::to_string(spec.rank));
  int out[2] = {-1, -1}, err[2] = {-1, -1};
  if (tag && (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0))
    return Status::IoError(std::string("kolorun: pipe: ") + strerror(errno));
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  if (tag) {
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_adddup2(&fa, err[1], 2);
  }
  posix_spawnattr_t attr;
  init_spawn_attributes(attr);
  // Note [Ranks die with kolorun]: this binary again, in its rank-starting mode.
  static const std::string self = [] {
    std::string path(4096, '\0');
    ssize_t n = ::readlink("/proc/self/exe", path.data(), path.size());
    return n > 0 ? path.substr(0, static_cast<size_t>(n)) : std::string();
  }();
  if (self.empty())
    return Status::IoError(std::string("kolorun: cannot find its own executable: ") +
                           strerror(errno));
  const std::string rank = std::to_string(spec.rank), parent = std::to_string(::getpid());
  std::vector<char*> argv = {const_cast<char*>(self.c_str()), const_cast<char*>(kExecRankFlag),
                             const_cast<char*>(rank.c_str()), const_cast<char*>(parent.c_str())};
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  Envp envp(spec.env);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, argv[0], &fa, &attr, argv.data(), envp.ptrs.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (tag) {
    ::close(out[1]);
    ::close(err[1]);
  }
  if (rc != 0) {
    if (tag) {
      ::close(out[0]);
      ::close(err[0]);
    }
    return Status::IoError("cannot start " + spec.role + " " + std::to_string(spec.rank) + ": " +
                           spec.argv[0] + ": " + strerror(rc));
  }
  child.rank = spec.rank;
  child.pid = pid;
  child.alive = true;
  if (tag) {
    child.out_fd = out[0];
    child.err_fd = err[0];
    // Built by appending: GCC 12 warns falsely (-Wrestrict) on "[" + std::to_string(..).
    std::string prefix = "[";
    prefix += std::to_string(spec.rank);
    prefix += "] ";
    child.out = std::make_unique<LinePrefixer>(prefix, out_sink);
    child.err = std::make_unique<LinePrefixer>(prefix, err_sink);
  }
  return Status::Ok();
}

// Each rank's whole process group, also once the rank itself was reaped: what it started (a
// helper run by system()) stays in its group and must not outlive the job. The kernel does not
// reuse a pid while a process group of that number exists, so the signal reaches nobody else.
void signal_group(Child& c, int sig) {
  if (c.pid <= 0 || c.group_gone) return;
  if (::kill(-c.pid, sig) != 0 && errno == ESRCH) c.group_gone = true;
}

void signal_all(std::vector<Child>& children, int sig) {
  for (auto& c : children) signal_group(c, sig);
}

// Reads what is available on fd into its prefixer; closes fd at EOF or error.
void pump(int& fd, LinePrefixer& lines) {
  char buf[65536];
  ssize_t n = ::read(fd, buf, sizeof buf);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
  if (n <= 0) {
    lines.finish();
    ::close(fd);
    fd = -1;
    return;
  }
  lines.feed(std::string_view(buf, static_cast<size_t>(n)));
}

// Note [kolorun output never blocks]: writes what is buffered while the readers take it. Not
// interrupted, it waits as long as they keep the descriptors open (a pager; the signals that
// would end that wait have their default action again, so they end kolorun); interrupted, it
// waits at most kFlushBound, then drops the rest and says so on stderr if that is writable.
void flush_at_exit(const std::vector<OutputSink*>& sinks, bool interrupted) {
  const auto deadline = Clock::now() + kFlushBound;
  while (true) {
    std::vector<pollfd> fds;
    for (OutputSink* s : sinks)
      if (s->wants_write()) fds.push_back({s->fd(), POLLOUT, 0});
    if (fds.empty()) return;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (interrupted && left.count() <= 0) break;
    int wait_ms = interrupted ? static_cast<int>(std::min<int64_t>(left.count(), 100)) : 100;
    ::poll(fds.data(), fds.size(), wait_ms);
    for (OutputSink* s : sinks) s->flush();
  }
  for (OutputSink* s : sinks) {
    if (!s->wants_write()) continue;
    OutputSink note(2);
    note.write("kolorun: dropped the last " + std::to_string(s->drop()) + " bytes of output to " +
               (s->fd() == 1 ? "stdout" : "stderr") + ": nobody read them within " +
               std::to_string(kFlushBound.count()) + " s of the interruption\n");
    note.flush();
  }
}
}  // namespace kolo::kolorun
