#include "tools/kolorun/failure_watch.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <string_view>

namespace kolo::kolorun {
namespace {
constexpr char kAbortKey[] = "kolorun/abort";
constexpr char kClaimKey[] = "kolorun/abort/claims";

// Writes all of data to the watch's own pipe, retrying on EINTR and short writes; errors are
// ignored (the pipe only wakes the supervisor's poll).
void write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    data.remove_prefix(static_cast<size_t>(n));
  }
}
}  // namespace

FailureWatch::FailureWatch(Store& store, int node_rank) : store_(store), node_rank_(node_rank) {
  if (::pipe2(pipe_, O_CLOEXEC) != 0) pipe_[0] = pipe_[1] = -1;
  thread_ = std::thread([this] { run(); });
}

FailureWatch::~FailureWatch() {
  stop_ = true;
  thread_.join();  // the thread checks stop_ at least every poll interval
  if (reporter_.joinable()) reporter_.join();
  for (int fd : pipe_)
    if (fd >= 0) ::close(fd);
}

void FailureWatch::publish(const std::string& what) {
  if (reporter_.joinable()) return;
  reporter_ = std::thread([this, what] { send_report(what); });
}

void FailureWatch::send_report(const std::string& what) {
  if (store_lost_) return;
  // The counter makes the first report the one everybody sees, even if two nodes fail at once.
  auto claim = store_.add(kClaimKey, 1);
  if (!claim.ok()) {
    store_lost_ = true;
    return;
  }
  if (*claim == 1 &&
      !store_.set(kAbortKey, "node " + std::to_string(node_rank_) + ": " + what).ok())
    store_lost_ = true;
}

void FailureWatch::run() {
  // Short gets so that the destructor is never kept waiting long.
  while (!stop_) {
    auto v = store_.get(kAbortKey, std::chrono::milliseconds(250));
    if (v.ok()) {
      std::string mine = "node " + std::to_string(node_rank_) + ":";
      if (v->rfind(mine, 0) != 0 && pipe_[1] >= 0) write_all(pipe_[1], *v);
      return;
    }
    if (v.status().code() != StatusCode::kTimeout) {  // store gone: nothing to watch
      store_lost_ = true;
      return;
    }
  }
}

}  // namespace kolo::kolorun
