#include "rendezvous/file_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

#include "rendezvous/store_common.h"

namespace kolo {

using namespace store_internal;
using Clock = std::chrono::steady_clock;

namespace {

constexpr size_t kMaxNameBytes = 240;

std::string encode_key(const std::string& key) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : key) {
    if (std::isalnum(c) || c == '.' || c == '_' || c == '-') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

Status io_error(const std::string& what, const std::string& path) {
  return Status::IoError("file store: " + what + " " + path + ": " + std::strerror(errno));
}

// Reads a whole file; nullopt-like NotFound is reported through `found`.
Result<std::string> read_file(const std::string& path, bool& found) {
  found = false;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::string();
    return io_error("cannot open", path);
  }
  found = true;
  std::string out;
  char buf[65536];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      Status s = io_error("cannot read", path);
      ::close(fd);
      return s;
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

// Closes a descriptor when it goes out of scope (and with it the flock).
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

Result<std::unique_ptr<FileStore>> FileStore::open(const std::string& dir) {
  if (dir.empty()) return Status::InvalidArgument("FileStore::open: dir must not be empty");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return Status::IoError("file store: cannot create directory " + dir + ": " + ec.message());
  if (!std::filesystem::is_directory(dir, ec))
    return Status::InvalidArgument("FileStore::open: " + dir + " is not a directory");
  return std::unique_ptr<FileStore>(new FileStore(dir));
}

Result<std::string> FileStore::key_path(std::string_view op, const std::string& key) const {
  KOLO_RETURN_IF_ERROR(validate_key(op, key));
  std::string name = encode_key(key);
  if (name.size() + 2 > kMaxNameBytes)
    return Status::InvalidArgument(std::string(op) + ": file store keys must encode to at most " +
                                   std::to_string(kMaxNameBytes - 2) + " bytes, \"" +
                                   key.substr(0, 64) + "...\" encodes to " +
                                   std::to_string(name.size()));
  return dir_ + "/k_" + name;
}

Status FileStore::write_atomically(const std::string& path, const std::string& value) {
  // The temporary name is unique per process and call, so concurrent writers never share one.
  // The counter is process-wide: several FileStores of one process may share a folder (a
  // per-store counter let two of them write the same temporary, and one rename then failed).
  static std::atomic<uint64_t> counter{0};
  std::string tmp =
      dir_ + "/t_" + std::to_string(::getpid()) + "_" + std::to_string(counter.fetch_add(1));
  Fd f{::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
  if (f.fd < 0) return io_error("cannot create", tmp);
  size_t off = 0;
  while (off < value.size()) {
    ssize_t n = ::write(f.fd, value.data() + off, value.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      Status s = io_error("cannot write", tmp);
      ::unlink(tmp.c_str());
      return s;
    }
    off += static_cast<size_t>(n);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    Status s = io_error("cannot rename into", path);
    ::unlink(tmp.c_str());
    return s;
  }
  return Status::Ok();
}

Status FileStore::set(const std::string& key, const std::string& value) {
  KOLO_ASSIGN_OR_RETURN(std::string path, key_path("store set", key));
  KOLO_RETURN_IF_ERROR(validate_value("store set", key, value));
  return write_atomically(path, value);
}

Result<bool> FileStore::check(const std::string& key) {
  KOLO_ASSIGN_OR_RETURN(std::string path, key_path("store check", key));
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) return true;
  if (errno == ENOENT) return false;
  return io_error("cannot stat", path);
}

Status FileStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  KOLO_RETURN_IF_ERROR(validate_timeout("store wait", timeout));
  std::vector<std::string> missing = keys;
  for (const auto& k : keys) KOLO_RETURN_IF_ERROR(key_path("store wait", k).status());
  auto deadline = Clock::now() + timeout;
  auto pause = std::chrono::milliseconds(1);
  while (true) {
    std::vector<std::string> still;
    for (const auto& k : missing) {
      KOLO_ASSIGN_OR_RETURN(bool present, check(k));
      if (!present) still.push_back(k);
    }
    missing = std::move(still);
    if (missing.empty()) return Status::Ok();
    auto now = Clock::now();
    if (now >= deadline) return missing_keys_timeout("wait", timeout, missing);
    std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - now));
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

Result<std::string> FileStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  KOLO_ASSIGN_OR_RETURN(std::string path, key_path("store get", key));
  KOLO_RETURN_IF_ERROR(validate_timeout("store get", timeout));
  auto deadline = Clock::now() + timeout;
  auto pause = std::chrono::milliseconds(1);
  while (true) {
    bool found = false;
    KOLO_ASSIGN_OR_RETURN(std::string value, read_file(path, found));
    if (found) return value;
    auto now = Clock::now();
    if (now >= deadline) return missing_keys_timeout("get", timeout, {key});
    std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - now));
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

Result<int64_t> FileStore::add(const std::string& key, int64_t delta) {
  KOLO_ASSIGN_OR_RETURN(std::string path, key_path("store add", key));
  std::string lock_path = dir_ + "/l_" + path.substr(dir_.size() + 3);
  Fd lock{::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)};
  if (lock.fd < 0) return io_error("cannot open lock file", lock_path);
  while (::flock(lock.fd, LOCK_EX) != 0) {
    if (errno != EINTR) return io_error("cannot lock", lock_path);
  }
  bool found = false;
  KOLO_ASSIGN_OR_RETURN(std::string text, read_file(path, found));
  int64_t current = 0;
  if (found) {
    KOLO_ASSIGN_OR_RETURN(current, parse_counter(key, text));
  }
  KOLO_ASSIGN_OR_RETURN(int64_t next, checked_add(key, current, delta));
  KOLO_RETURN_IF_ERROR(write_atomically(path, std::to_string(next)));
  return next;  // the lock is released when `lock` closes
}

}  // namespace kolo
