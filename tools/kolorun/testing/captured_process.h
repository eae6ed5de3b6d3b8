// Test helpers shared by kolorun's end-to-end tests: a process whose output is captured, with
// bounded waits (a broken kolorun fails the test instead of hanging it), and a temporary folder.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

extern char** environ;

namespace kolo::kolorun::testing {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// A process whose stdout and stderr are captured. finish() kills it if it outlives the bound,
// so a broken kolorun fails the test instead of hanging it.
class Proc {
 public:
  explicit Proc(const std::vector<std::string>& args) {
    int out[2], err[2];
    EXPECT_EQ(::pipe2(out, O_CLOEXEC), 0);
    EXPECT_EQ(::pipe2(err, O_CLOEXEC), 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_adddup2(&fa, err[1], 2);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    EXPECT_EQ(posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    ::close(out[1]);
    ::close(err[1]);
    out_fd_ = out[0];
    err_fd_ = err[0];
  }
  ~Proc() {
    if (!done_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (out_fd_ >= 0) ::close(out_fd_);
    if (err_fd_ >= 0) ::close(err_fd_);
  }

  // Reads output until `text` has appeared in stdout `count` times or the bound passes.
  bool wait_for_stdout(const std::string& text, int count, std::chrono::milliseconds bound) {
    auto deadline = Clock::now() + bound;
    while (occurrences(out_, text) < count) {
      if (Clock::now() >= deadline || (out_fd_ < 0 && err_fd_ < 0)) return false;
      pump(50ms);
    }
    return true;
  }

  // The same for stderr.
  bool wait_for_stderr(const std::string& text, int count, std::chrono::milliseconds bound) {
    auto deadline = Clock::now() + bound;
    while (occurrences(err_, text) < count) {
      if (Clock::now() >= deadline || (out_fd_ < 0 && err_fd_ < 0)) return false;
      pump(50ms);
    }
    return true;
  }

  void signal(int sig) { ::kill(pid_, sig); }

  // Waits for exit (killing it after `bound`); returns the wait status.
  int finish(std::chrono::milliseconds bound = 30s) {
    auto deadline = Clock::now() + bound;
    while (out_fd_ >= 0 || err_fd_ >= 0) {
      if (Clock::now() >= deadline) {
        ADD_FAILURE() << "process outlived " << bound.count() << " ms; killing it";
        ::kill(pid_, SIGKILL);
        break;
      }
      pump(50ms);
    }
    ::waitpid(pid_, &status_, 0);
    done_ = true;
    return status_;
  }

  const std::string& out() const { return out_; }
  const std::string& err() const { return err_; }
  pid_t pid() const { return pid_; }

 private:
  static int occurrences(const std::string& s, const std::string& t) {
    int n = 0;
    for (size_t p = s.find(t); p != std::string::npos; p = s.find(t, p + 1)) ++n;
    return n;
  }
  void pump(std::chrono::milliseconds wait) {
    std::vector<pollfd> fds;
    if (out_fd_ >= 0) fds.push_back({out_fd_, POLLIN, 0});
    if (err_fd_ >= 0) fds.push_back({err_fd_, POLLIN, 0});
    if (fds.empty()) return;
    ::poll(fds.data(), fds.size(), static_cast<int>(wait.count()));
    for (auto& p : fds) {
      if (!(p.revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[4096];
      ssize_t n = ::read(p.fd, buf, sizeof buf);
      bool is_out = p.fd == out_fd_;
      if (n <= 0) {
        ::close(p.fd);
        (is_out ? out_fd_ : err_fd_) = -1;
      } else {
        (is_out ? out_ : err_).append(buf, static_cast<size_t>(n));
      }
    }
  }

  pid_t pid_ = -1;
  int out_fd_ = -1, err_fd_ = -1;
  std::string out_, err_;
  int status_ = 0;
  bool done_ = false;
};

inline int exit_code(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

// A temporary directory (READY_DIR markers, scripts), removed afterwards.
struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/kolorun_test_XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

}  // namespace kolo::kolorun::testing
