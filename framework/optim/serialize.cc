#include "framework/optim/serialize.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

namespace kolo::fw {
namespace {

// A name read from a file, fit for an error message: the file is not trusted, so bytes outside
// printable ASCII appear as \xHH and a long name is cut at 120 characters.
std::string printable(std::string_view name) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : name.substr(0, 120)) {
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  if (name.size() > 120) out += "... (" + std::to_string(name.size()) + " bytes)";
  return out;
}

static_assert(std::endian::native == std::endian::little,
              "the checkpoint format is little-endian; add byte swapping for this host");

constexpr size_t kMaxNameLength = 65535;
constexpr int kMaxDims = 16;

[[noreturn]] void fail(StatusCode code, const std::string& msg) { throw Error(Status(code, msg)); }

std::string errno_text() { return std::strerror(errno); }

// Streams bytes to a file descriptor through a buffer, keeping the running CRC-32.
class Writer {
 public:
  Writer(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  void put(const void* data, size_t n) {
    crc_ = crc32_z(crc_, static_cast<const Bytef*>(data), n);
    const auto* p = static_cast<const uint8_t*>(data);
    if (buf_.size() + n > kBuffer) flush();
    if (n >= kBuffer) {
      write_all(p, n);
    } else {
      buf_.insert(buf_.end(), p, p + n);
    }
  }
  template <typename T>
  void put_value(T v) {
    put(&v, sizeof(v));
  }
  void flush() {
    write_all(buf_.data(), buf_.size());
    buf_.clear();
  }
  uLong crc() const { return crc_; }

 private:
  static constexpr size_t kBuffer = 1 << 20;
  void write_all(const uint8_t* p, size_t n) {
    while (n > 0) {
      const ssize_t w = ::write(fd_, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        fail(StatusCode::kIoError, "save_tensors: write to '" + path_ + "' failed after " +
                                       std::to_string(written_) + " bytes: " + errno_text());
      }
      p += w;
      n -= static_cast<size_t>(w);
      written_ += static_cast<size_t>(w);
    }
  }
  int fd_;
  std::string path_;
  std::vector<uint8_t> buf_;
  uLong crc_ = crc32_z(0, nullptr, 0);
  size_t written_ = 0;
};

// Bounds-checked reads from an in-memory file image; every failure names file and offset.
class Reader {
 public:
  Reader(const std::vector<uint8_t>& bytes, std::string path, size_t end)
      : bytes_(bytes), path_(std::move(path)), end_(end) {}
  const uint8_t* take(size_t n, const std::string& expected) {
    if (end_ - pos_ < n) {
      fail(StatusCode::kInvalidArgument,
           "checkpoint '" + path_ + "': offset " + std::to_string(pos_) + ": expected " + expected +
               ", file ends after " + std::to_string(bytes_.size()) + " bytes");
    }
    const uint8_t* p = bytes_.data() + pos_;
    pos_ += n;
    return p;
  }
  template <typename T>
  T value(const std::string& expected) {
    T v;
    std::memcpy(&v, take(sizeof(T), expected), sizeof(T));
    return v;
  }
  size_t pos() const { return pos_; }
  [[noreturn]] void bad(size_t offset, const std::string& what) const {
    fail(StatusCode::kInvalidArgument,
         "checkpoint '" + path_ + "': offset " + std::to_string(offset) + ": " + what);
  }

 private:
  const std::vector<uint8_t>& bytes_;
  std::string path_;
  size_t end_;  // the trailer starts here
  size_t pos_ = 0;
};

std::vector<uint8_t> read_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    fail(StatusCode::kIoError, "load_tensors: cannot open '" + path + "': " + errno_text());
  std::vector<uint8_t> out;
  uint8_t chunk[1 << 16];
  for (;;) {
    const ssize_t r = ::read(fd, chunk, sizeof(chunk));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      const std::string err = errno_text();
      ::close(fd);
      fail(StatusCode::kIoError, "load_tensors: read of '" + path + "' failed: " + err);
    }
    if (r == 0) break;
    out.insert(out.end(), chunk, chunk + r);
  }
  ::close(fd);
  return out;
}

std::string prefixed(const std::string& prefix, const std::string& name) { return prefix + name; }

// What save_tensors refuses, checked before any file is created.
void check_entries(const NamedTensors& entries) {
  std::set<std::string> names;
  for (size_t i = 0; i < entries.size(); ++i) {
    const auto& [name, t] = entries[i];
    const std::string where = "save_tensors: entry " + std::to_string(i);
    if (name.empty() || name.size() > kMaxNameLength) {
      fail(StatusCode::kInvalidArgument, where + ": name length must be in [1, " +
                                             std::to_string(kMaxNameLength) + "], got " +
                                             std::to_string(name.size()));
    }
    if (!names.insert(name).second) {
      fail(StatusCode::kInvalidArgument, where + ": duplicate name '" + name + "'");
    }
    if (!t.defined()) fail(StatusCode::kInvalidArgument, where + " ('" + name + "') is undefined");
    if (t.dim() > kMaxDims) {
      fail(StatusCode::kInvalidArgument, where + " ('" + name + "') has " +
                                             std::to_string(t.dim()) + " dimensions, at most " +
                                             std::to_string(kMaxDims) + " are supported");
    }
  }
  if (entries.size() > UINT32_MAX) {
    fail(StatusCode::kInvalidArgument,
         "save_tensors: at most 2^32 - 1 entries fit the format, got " +
             std::to_string(entries.size()));
  }
}

// The whole file in the format of serialize.h, trailer included.
void write_entries(Writer& w, const NamedTensors& entries) {
  w.put(kCheckpointMagic, sizeof(kCheckpointMagic));
  w.put_value<uint32_t>(kCheckpointVersion);
  w.put_value<uint32_t>(static_cast<uint32_t>(entries.size()));
  for (const auto& [name, tensor] : entries) {
    w.put_value<uint32_t>(static_cast<uint32_t>(name.size()));
    w.put(name.data(), name.size());
    w.put_value<uint8_t>(static_cast<uint8_t>(tensor.dtype()));
    w.put_value<uint8_t>(static_cast<uint8_t>(tensor.dim()));
    for (int64_t d : tensor.shape()) w.put_value<int64_t>(d);
    const Tensor host = tensor.device().is_cpu() ? tensor : tensor.to(Device::cpu());
    w.put_value<uint64_t>(host.nbytes());
    w.put(host.raw_data(), host.nbytes());
  }
  const auto crc = static_cast<uint32_t>(w.crc());
  w.put_value<uint32_t>(crc);
  w.flush();
}

// Creates `tmp` (which must not exist) holding the entries, on disk when this returns; on any
// failure removes it and throws.
void write_new_file(const std::string& tmp, const NamedTensors& entries) {
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    fail(StatusCode::kIoError,
         "save_tensors: cannot create temporary file '" + tmp + "': " + errno_text());
  }
  bool fd_open = true;
  try {
    Writer w(fd, tmp);
    write_entries(w, entries);
    if (::fsync(fd) != 0) {
      fail(StatusCode::kIoError, "save_tensors: fsync of '" + tmp + "' failed: " + errno_text());
    }
    fd_open = false;  // the descriptor is released whatever close returns
    if (::close(fd) != 0) {
      const std::string err = errno_text();
      fail(StatusCode::kIoError, "save_tensors: close of '" + tmp + "' failed: " + err);
    }
  } catch (...) {
    if (fd_open) ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
}

// Renames the complete `tmp` over `path`: a reader sees the old file or the new one.
void replace_file(const std::string& tmp, const std::string& path) {
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string err = errno_text();
    ::unlink(tmp.c_str());
    fail(StatusCode::kIoError,
         "save_tensors: cannot rename '" + tmp + "' to '" + path + "': " + err);
  }
  // Make the rename itself durable. Best effort: the file is complete either way.
  const std::string dir = std::filesystem::path(path).parent_path().string();
  const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

// The 16-byte header up to the entry count: magic, then a version this build reads. Returns
// the entry count.
uint32_t read_header(const std::vector<uint8_t>& bytes, Reader& r, const std::string& file) {
  if (bytes.size() < sizeof(kCheckpointMagic) + 12) {
    fail(StatusCode::kInvalidArgument,
         file +
             ": offset 0: expected a header of 16 bytes and a 4-byte checksum, file ends after " +
             std::to_string(bytes.size()) + " bytes");
  }
  if (std::memcmp(bytes.data(), kCheckpointMagic, sizeof(kCheckpointMagic)) != 0) {
    fail(StatusCode::kInvalidArgument,
         file + ": offset 0: expected magic \"KOLOCKPT\"; this is not a Kolo checkpoint");
  }
  r.take(sizeof(kCheckpointMagic), "magic");
  const auto version = r.value<uint32_t>("format version");
  if (version != kCheckpointVersion) {
    fail(StatusCode::kUnsupported, file + ": offset 8: format version " + std::to_string(version) +
                                       " is not supported; this build reads version " +
                                       std::to_string(kCheckpointVersion));
  }
  return r.value<uint32_t>("entry count");
}

// An entry's name, checked for length and against the names before it (`names`, which it joins).
std::string read_name(Reader& r, const std::string& which, std::set<std::string>& names) {
  const size_t name_at = r.pos();
  const auto len = r.value<uint32_t>("name length of " + which);
  if (len == 0 || len > kMaxNameLength) {
    r.bad(name_at,
          "expected a name length in [1, 65535] for " + which + ", got " + std::to_string(len));
  }
  const auto* p = reinterpret_cast<const char*>(
      r.take(len, std::to_string(len) + " bytes of name of " + which));
  std::string name(p, len);
  if (!names.insert(name).second)
    r.bad(name_at, "duplicate name in " + which + " '" + printable(name) + "'");
  return name;
}

struct EntryShape {
  Shape shape;
  uint64_t numel = 1;
  bool huge = false;  // more elements than the file has bytes
};

// The number of dimensions and their sizes of entry `what` in a file of `file_size` bytes.
EntryShape read_shape(Reader& r, const std::string& what, size_t file_size) {
  const size_t ndim_at = r.pos();
  const auto ndim = r.value<uint8_t>("number of dimensions of " + what);
  if (ndim > kMaxDims) {
    r.bad(ndim_at, "expected at most 16 dimensions for " + what + ", got " + std::to_string(ndim));
  }
  EntryShape s;
  // Tensors count elements in int64_t, partial products included (a 0 later in the shape
  // does not save an overflow earlier), so any shape whose nonzero sizes multiply past it is
  // refused here, before a tensor is made of it.
  int64_t nonzero_product = 1;
  for (int d = 0; d < ndim; ++d) {
    const size_t at = r.pos();
    const auto dim = r.value<int64_t>("size of dimension " + std::to_string(d) + " of " + what);
    if (dim < 0) r.bad(at, "negative size " + std::to_string(dim) + " in " + what);
    if (dim > 0 && __builtin_mul_overflow(nonzero_product, dim, &nonzero_product))
      r.bad(at, "the sizes of " + what + " multiply past 2^63 elements at dimension " +
                    std::to_string(d));
    s.shape.push_back(dim);
    if (dim != 0 && s.numel > file_size / static_cast<uint64_t>(dim)) s.huge = true;
    s.numel = dim == 0 ? 0 : s.numel * static_cast<uint64_t>(dim);
  }
  if (s.numel == 0) s.huge = false;
  return s;
}

// Entry number `e`: name, dtype, shape and payload, each checked where it is read.
std::pair<std::string, Tensor> read_entry(Reader& r, uint32_t e, std::set<std::string>& names,
                                          size_t file_size) {
  const std::string which = "entry " + std::to_string(e);
  std::string name = read_name(r, which, names);
  const std::string what = which + " '" + printable(name) + "'";
  const size_t dtype_at = r.pos();
  const auto dtype_code = r.value<uint8_t>("dtype of " + what);
  if (!is_valid_dtype(dtype_code)) {
    r.bad(dtype_at, "expected a dtype code in [0, " + std::to_string(kNumDataTypes) + ") for " +
                        what + ", got " + std::to_string(dtype_code));
  }
  const auto dtype = static_cast<DataType>(dtype_code);
  const EntryShape s = read_shape(r, what, file_size);
  const size_t nbytes_at = r.pos();
  const auto nbytes = r.value<uint64_t>("payload size of " + what);
  const uint64_t want = s.numel * dtype_size(dtype);
  if (s.huge || nbytes != want) {
    r.bad(nbytes_at, "payload size of " + what + " is " + std::to_string(nbytes) +
                         " bytes, but shape " + shape_to_string(s.shape) + " of " +
                         std::string(dtype_name(dtype)) + " needs " +
                         (s.huge ? std::string("more than the file holds") : std::to_string(want)));
  }
  const uint8_t* payload = r.take(nbytes, std::to_string(nbytes) + " bytes of payload for " + what);
  Tensor t = Tensor::empty(s.shape, Device::cpu(), dtype);
  if (nbytes > 0) std::memcpy(t.raw_data(), payload, nbytes);
  return {std::move(name), std::move(t)};
}

// The trailer against the CRC-32 of every byte before it (which starts at `end`).
void check_checksum(const std::vector<uint8_t>& bytes, size_t end, const std::string& file) {
  uint32_t stored;
  std::memcpy(&stored, bytes.data() + end, 4);
  const auto computed = static_cast<uint32_t>(crc32_z(crc32_z(0, nullptr, 0), bytes.data(), end));
  if (stored != computed) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "stored 0x%08x, computed 0x%08x", stored, computed);
    fail(StatusCode::kIoError,
         file + ": checksum mismatch (" + buf + "): the file is truncated or corrupt");
  }
}

}  // namespace

void save_tensors(const std::string& path, const NamedTensors& entries) {
  check_entries(entries);  // bad input never creates a file
  static std::atomic<uint64_t> counter{0};
  const std::string tmp =
      path + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
  write_new_file(tmp, entries);
  replace_file(tmp, path);
}

NamedTensors load_tensors(const std::string& path) {
  const std::vector<uint8_t> bytes = read_file(path);
  const std::string file = "checkpoint '" + path + "'";
  const size_t end = bytes.size() >= 4 ? bytes.size() - 4 : 0;  // the trailer starts here
  Reader r(bytes, path, end);
  const uint32_t count = read_header(bytes, r, file);
  NamedTensors out;
  std::set<std::string> names;
  for (uint32_t e = 0; e < count; ++e) out.push_back(read_entry(r, e, names, bytes.size()));
  if (r.pos() != end) {
    r.bad(r.pos(), "expected the 4-byte checksum after " + std::to_string(count) +
                       " entries, found " + std::to_string(end - r.pos()) + " extra bytes");
  }
  // Checked after the structure so that a truncated file is reported with the offset where
  // data is missing; the checksum then catches damage inside names and payloads.
  check_checksum(bytes, end, file);
  return out;
}

void load_tensors_into(const std::string& path, const NamedTensors& targets) {
  NamedTensors loaded = load_tensors(path);
  const std::string file = "checkpoint '" + path + "'";
  std::map<std::string, const Tensor*> by_name;
  for (const auto& [name, t] : loaded) by_name[name] = &t;
  std::set<std::string> wanted;
  std::vector<std::pair<const Tensor*, const Tensor*>> copies;  // (target, source)
  for (const auto& [name, target] : targets) {
    if (!target.defined()) {
      fail(StatusCode::kInvalidArgument, "load_tensors_into: target '" + name + "' is undefined");
    }
    if (!wanted.insert(name).second) {
      fail(StatusCode::kInvalidArgument, "load_tensors_into: duplicate target name '" + name + "'");
    }
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      fail(StatusCode::kMismatch, file + " has no entry '" + name + "' (" +
                                      std::to_string(loaded.size()) + " entries in the file)");
    }
    const Tensor& src = *it->second;
    if (src.dtype() != target.dtype()) {
      fail(StatusCode::kMismatch, file + ": entry '" + name + "' has dtype " +
                                      std::string(dtype_name(src.dtype())) + ", expected " +
                                      std::string(dtype_name(target.dtype())));
    }
    if (src.shape() != target.shape()) {
      fail(StatusCode::kMismatch, file + ": entry '" + name + "' has shape " +
                                      shape_to_string(src.shape()) + ", expected " +
                                      shape_to_string(target.shape()));
    }
    copies.emplace_back(&target, &src);
  }
  for (const auto& [name, t] : loaded) {
    if (!wanted.count(name)) {
      fail(StatusCode::kMismatch, file + " has an unexpected entry '" + printable(name) +
                                      "' that nothing in the model or optimizer takes");
    }
  }
  for (auto& [target, src] : copies) {
    Tensor handle = *target;  // a handle: copy_ writes the caller's storage
    handle.copy_(*src);
  }
}

void detail::check_unique_names(const NamedTensors& named, const char* fn) {
  std::set<std::string> seen;
  for (const auto& [name, t] : named) {
    if (!seen.insert(name).second) {
      fail(StatusCode::kInvalidArgument, std::string(fn) + ": name '" + name + "' appears twice");
    }
  }
}

NamedTensors optimizer_state(Optimizer& optimizer) {
  NamedTensors out;
  for (auto& [name, t] : optimizer.state_tensors()) out.emplace_back("optim/" + name, *t);
  return out;
}

namespace {
NamedTensors checkpoint_entries(const NamedTensors& model, Optimizer* optimizer) {
  NamedTensors all;
  for (const auto& [name, t] : model) all.emplace_back(prefixed("model/", name), t);
  if (optimizer) {
    for (auto& e : optimizer_state(*optimizer)) all.push_back(std::move(e));
  }
  return all;
}
}  // namespace

void save_checkpoint(const std::string& path, const NamedTensors& model, Optimizer* optimizer) {
  save_tensors(path, checkpoint_entries(model, optimizer));
}

void load_checkpoint(const std::string& path, const NamedTensors& model, Optimizer* optimizer) {
  load_tensors_into(path, checkpoint_entries(model, optimizer));
}

}  // namespace kolo::fw
