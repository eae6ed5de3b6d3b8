// Launch: one launcher process (kolorun or mpirun) of a fault-injection test, started through
// bash, with its merged output read by a thread into time-stamped lines. The test waits for
// lines, signals ranks or the launcher, and bounds how long everything takes to end.
// A Launch that is destroyed kills its process group and every rank that printed its pid, so a
// failed test leaves nothing running.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "common/thread_annotations.h"
#include "tests/support/process_state.h"

namespace kolo::faults {

using Clock = std::chrono::steady_clock;

using kolo::testing::has_ended;

class Launch {
 public:
  // Runs `command` with bash in a new process group; stdout and stderr go to one pipe.
  explicit Launch(const std::string& command) {
    int out[2];
    if (::pipe2(out, O_CLOEXEC) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::setpgid(0, 0);
      ::dup2(out[1], 1);
      ::dup2(out[1], 2);
      ::execl("/bin/bash", "bash", "-c", command.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::setpgid(pid_, pid_);  // also here, so that it holds before the first signal
    ::close(out[1]);
    reader_ = std::thread([this, fd = out[0]] { read_lines(fd); });
  }
  ~Launch() {
    if (!status_) {
      ::kill(-pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    for (const auto& [rank, pid] : rank_pids())
      if (!has_ended(pid)) ::kill(pid, SIGKILL);
    stop_ = true;
    if (reader_.joinable()) reader_.join();
  }
  Launch(const Launch&) = delete;
  Launch& operator=(const Launch&) = delete;

  pid_t pid() const { return pid_; }
  void signal(int sig) { ::kill(pid_, sig); }

  // Waits until `count` lines match `pattern` (or the bound passes); returns the time the
  // count-th matching line arrived.
  std::optional<Clock::time_point> wait_for(const std::string& pattern, int count,
                                            std::chrono::milliseconds bound) {
    const std::regex re(pattern);
    MutexLock lock(mu_);
    std::optional<Clock::time_point> at;
    cv_.wait_for(lock.native(), bound, [&]() KOLO_REQUIRES(mu_) {
      int seen = 0;
      for (const auto& [time, line] : lines_)
        if (std::regex_search(line, re) && ++seen == count) {
          at = time;
          return true;
        }
      return false;
    });
    return at;
  }

  // Waits for the launcher to exit, killing its process group after `bound`. Returns the wait
  // status, or nullopt when the bound passed (the group is then killed).
  std::optional<int> finish(std::chrono::milliseconds bound) {
    const auto deadline = Clock::now() + bound;
    int status = 0;
    while (::waitpid(pid_, &status, WNOHANG) == 0) {
      if (Clock::now() >= deadline) {
        ::kill(-pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        status_ = status;
        return std::nullopt;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    status_ = status;
    ended_ = Clock::now();
    // The launcher is gone; give the reader a moment to take in its last lines (the pipe ends
    // when the ranks' copies of it close too).
    MutexLock lock(mu_);
    cv_.wait_for(lock.native(), std::chrono::seconds(2), [&]() KOLO_REQUIRES(mu_) { return eof_; });
    return status;
  }
  Clock::time_point ended() const { return ended_; }

  // The pids that the ranks printed ("rank R pid P ready"), by rank.
  std::map<int, pid_t> rank_pids() const {
    std::map<int, pid_t> pids;
    const std::regex re(R"(rank (\d+) pid (\d+) ready)");
    MutexLock lock(mu_);
    for (const auto& [time, line] : lines_) {
      std::smatch m;
      if (std::regex_search(line, m, re)) pids[std::stoi(m[1])] = std::stoi(m[2]);
    }
    return pids;
  }

  std::string output() const {
    MutexLock lock(mu_);
    std::string all;
    for (const auto& [time, line] : lines_) all += line + "\n";
    return all;
  }

 private:
  // Until EOF or stop_: a rank that outlived its launcher may hold the pipe open forever.
  void read_lines(int fd) {
    std::string partial;
    char buf[4096];
    while (!stop_) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      partial.append(buf, static_cast<size_t>(n));
      size_t nl;
      MutexLock lock(mu_);
      while ((nl = partial.find('\n')) != std::string::npos) {
        lines_.emplace_back(Clock::now(), partial.substr(0, nl));
        partial.erase(0, nl + 1);
      }
      cv_.notify_all();
    }
    ::close(fd);
    MutexLock lock(mu_);
    eof_ = true;
    cv_.notify_all();
  }

  pid_t pid_ = -1;
  std::optional<int> status_;
  Clock::time_point ended_;
  mutable Mutex mu_;
  std::condition_variable cv_;
  std::vector<std::pair<Clock::time_point, std::string>> lines_ KOLO_GUARDED_BY(mu_);
  bool eof_ KOLO_GUARDED_BY(mu_) = false;
  std::atomic<bool> stop_{false};
  std::thread reader_;
};

}  // namespace kolo::faults
