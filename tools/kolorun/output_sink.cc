#include "tools/kolorun/output_sink.h"

#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace kolo::kolorun {

OutputSink::OutputSink(int fd) : fd_(fd) {
  // Closed (kolorun started with >&-) or read-only: nothing can be written, and poll would
  // never report POLLOUT for it, so the buffer must not wait for that.
  const int flags = ::fcntl(fd, F_GETFL);
  broken_ = flags < 0 || (flags & O_ACCMODE) == O_RDONLY;
  struct stat st {};
  always_writable_ = ::fstat(fd, &st) == 0 && (S_ISREG(st.st_mode) || S_ISBLK(st.st_mode));
}

void OutputSink::write(std::string_view data) {
  if (broken_) return;
  if (head_ > 0 && head_ >= buf_.size() / 2) {  // keep appends amortised O(1), memory bounded
    buf_.erase(0, head_);
    head_ = 0;
  }
  buf_.append(data);
}

size_t OutputSink::flush() {
  size_t written = 0;
  while (!broken_ && wants_write()) {
    size_t chunk = buffered();
    if (!always_writable_) {
      // Note [kolorun output never blocks]: at most PIPE_BUF bytes, and only after POLLOUT.
      pollfd p{fd_, POLLOUT, 0};
      int r = ::poll(&p, 1, 0);
      if (r < 0 && errno == EINTR) continue;
      // An error, a hung-up reader or a closed fd (POLLNVAL): the write says which, and fails.
      if (r <= 0 || !(p.revents & (POLLOUT | POLLERR | POLLHUP | POLLNVAL))) break;
      chunk = std::min<size_t>(chunk, PIPE_BUF);
    }
    ssize_t n = ::write(fd_, buf_.data() + head_, chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;  // someone else made the description non-blocking
    if (n <= 0) {
      broken_ = true;
      drop();
      break;
    }
    head_ += static_cast<size_t>(n);
    written += static_cast<size_t>(n);
  }
  if (head_ == buf_.size()) buf_.clear(), head_ = 0;
  return written;
}

size_t OutputSink::drop() {
  size_t n = buffered();
  buf_.clear();
  head_ = 0;
  return n;
}

bool same_file(int a, int b) {
  struct stat sa = {};
  struct stat sb = {};
  if (::fstat(a, &sa) != 0 || ::fstat(b, &sb) != 0) return false;
  return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino && sa.st_rdev == sb.st_rdev;
}

}  // namespace kolo::kolorun
