#include "timeline/signal_stop.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <iterator>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/logging.h"
#include "common/thread_annotations.h"

namespace kolo::timeline_detail {
namespace {

constexpr int kSignals[] = {SIGTERM, SIGINT};

int g_wake_fd = -1;  // the pipe's write end; set once, before any handler is installed

void on_signal(int signo) {
  int saved = errno;
  auto byte = static_cast<unsigned char>(signo);
  (void)!::write(g_wake_fd, &byte, 1);  // async-signal-safe; a full pipe means one is pending
  errno = saved;
}

struct Registry {
  Mutex mu;
  std::vector<std::weak_ptr<SignalStoppable>> targets KOLO_GUARDED_BY(mu);
  bool installed KOLO_GUARDED_BY(mu) = false;
  struct sigaction previous[std::size(kSignals)] = {};  // set before `installed`

  void watch(int read_fd) {
    unsigned char byte = 0;
    for (;;) {
      ssize_t n = ::read(read_fd, &byte, 1);
      if (n == 1) break;
      if (n < 0 && errno == EINTR) continue;
      return;  // cannot happen: the write end is never closed
    }
    const int signo = byte;
    std::vector<std::shared_ptr<SignalStoppable>> alive;
    {
      MutexLock lock(mu);
      for (auto& w : targets)
        if (auto t = w.lock()) alive.push_back(std::move(t));
    }
    const std::string reason =
        std::string("the process received ") + (signo == SIGINT ? "SIGINT" : "SIGTERM");
    for (auto& t : alive) t->stop_for_signal(reason);
    alive.clear();
    // Back to what the program had, then the signal again: its default action ends the
    // process with the signal's status, as if Kolo had not been there.
    for (size_t i = 0; i < std::size(kSignals); ++i)
      ::sigaction(kSignals[i], &previous[i], nullptr);
    ::kill(::getpid(), signo);
  }
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: the watcher may outlive main()
  return *r;
}

}  // namespace

void register_for_signal_stop(std::weak_ptr<SignalStoppable> target) {
  Registry& r = registry();
  MutexLock lock(r.mu);
  // A timeline restarted (a recording window) registers again: keep one entry per target.
  std::erase_if(r.targets, [&](const auto& w) {
    return w.expired() || (!w.owner_before(target) && !target.owner_before(w));
  });
  r.targets.push_back(std::move(target));
  if (r.installed) return;
  int fds[2];
  // The write end never blocks: a handler must not wait, and one byte pending is enough.
  if (::pipe2(fds, O_CLOEXEC) != 0 || ::fcntl(fds[1], F_SETFL, O_NONBLOCK) != 0) {
    KOLO_LOG_WARNING("timeline: no pipe for signal handling (" << std::strerror(errno)
                                                               << "); a SIGTERM will cut traces");
    return;
  }
  g_wake_fd = fds[1];
  r.installed = true;
  std::thread([&r, fd = fds[0]] { r.watch(fd); }).detach();
  struct sigaction action = {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (size_t i = 0; i < std::size(kSignals); ++i) {
    ::sigaction(kSignals[i], nullptr, &r.previous[i]);
    if (r.previous[i].sa_handler == SIG_IGN) continue;  // nohup and friends: stay ignored
    ::sigaction(kSignals[i], &action, nullptr);
  }
}

}  // namespace kolo::timeline_detail
