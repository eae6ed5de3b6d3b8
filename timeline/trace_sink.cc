#include "timeline/trace_sink.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace kolo::timeline_detail {
namespace {

constexpr std::string_view kClosing = "\n]\n";

// A plain file rewritten in place with pwrite(2): `committed_` is where the next events go
// (the bracket and the tail start there); `size_` is how far the file reaches.
class JsonFileSink final : public TraceSink {
 public:
  JsonFileSink(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~JsonFileSink() override {
    if (fd_ >= 0) ::close(fd_);
  }

  Status write(std::string_view events, std::string_view tail) override {
    if (fd_ < 0) return closed();
    buffer_.assign(events);
    buffer_ += tail;
    // Blank what a longer tail left, so the file ends with this write's bracket.
    size_t end = committed_ + buffer_.size() + kClosing.size();
    if (end < size_) buffer_.append(size_ - end, ' ');
    buffer_ += kClosing;
    const size_t start = committed_;
    KOLO_RETURN_IF_ERROR(write_at(start, buffer_));
    committed_ = start + events.size();
    size_ = std::max(size_, start + buffer_.size());
    return Status::Ok();
  }

  Status close(std::string_view events) override {
    if (fd_ < 0) return closed();
    buffer_.assign(events);
    buffer_ += kClosing;
    Status st = write_at(committed_, buffer_);
    if (st.ok() && ::ftruncate(fd_, static_cast<off_t>(committed_ + buffer_.size())) != 0)
      st = error("truncating");
    if (::close(fd_) != 0 && st.ok()) st = error("closing");
    fd_ = -1;
    return st;
  }

 private:
  Status write_at(size_t offset, std::string_view bytes) {
    while (!bytes.empty()) {
      ssize_t n = ::pwrite(fd_, bytes.data(), bytes.size(), static_cast<off_t>(offset));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return error("writing");
      bytes.remove_prefix(static_cast<size_t>(n));
      offset += static_cast<size_t>(n);
    }
    return Status::Ok();
  }

  Status error(const char* what) const {
    return Status::IoError("timeline: " + std::string(what) + " '" + path_ +
                           "' failed: " + std::strerror(errno));
  }

  Status closed() const {
    return Status::PreconditionFailed("timeline: '" + path_ + "' is already closed");
  }

  int fd_;
  const std::string path_;
  size_t committed_ = 0;
  size_t size_ = 0;
  std::string buffer_;  // reused: steady state allocates nothing
};

// KOLO_TIMELINE=....gz: a gzip stream, flushed (Z_SYNC_FLUSH) at every write so that what was
// written can be decompressed if the process dies. A compressed stream cannot be rewritten in
// place, so the tail is dropped and the closing bracket comes only at close(): a killed
// process leaves an unterminated array (kolo-trace completes it) without its open spans.
class GzipSink final : public TraceSink {
 public:
  GzipSink(gzFile gz, std::string path) : gz_(gz), path_(std::move(path)) {}
  ~GzipSink() override {
    if (gz_ != nullptr) gzclose(gz_);
  }

  Status write(std::string_view events, std::string_view /*tail*/) override {
    if (gz_ == nullptr) return closed();
    if (!put(events) || gzflush(gz_, Z_SYNC_FLUSH) != Z_OK) return error("writing");
    return Status::Ok();
  }

  Status close(std::string_view events) override {
    if (gz_ == nullptr) return closed();
    bool ok = put(events) && put(kClosing);
    ok = gzclose(gz_) == Z_OK && ok;
    gz_ = nullptr;
    return ok ? Status::Ok() : error("closing");
  }

 private:
  bool put(std::string_view bytes) {
    return bytes.empty() || gzwrite(gz_, bytes.data(), static_cast<unsigned>(bytes.size())) ==
                                static_cast<int>(bytes.size());
  }
  Status error(const char* what) const {
    return Status::IoError("timeline: " + std::string(what) + " '" + path_ + "' failed");
  }
  Status closed() const {
    return Status::PreconditionFailed("timeline: '" + path_ + "' is already closed");
  }

  gzFile gz_;
  const std::string path_;
};

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

Result<std::unique_ptr<TraceSink>> TraceSink::open(const std::string& path) {
  if (ends_with(path, ".gz")) {
    gzFile gz = gzopen(path.c_str(), "wb6");
    if (gz == nullptr) {
      return Status::IoError("timeline: cannot open '" + path +
                             "' for writing: " + std::strerror(errno));
    }
    return std::unique_ptr<TraceSink>(new GzipSink(gz, path));
  }
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return Status::IoError("timeline: cannot open '" + path +
                           "' for writing: " + std::strerror(errno));
  }
  return std::unique_ptr<TraceSink>(new JsonFileSink(fd, path));
}

}  // namespace kolo::timeline_detail
