#include "framework/data/idx_reader.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "kolo/status.h"

namespace kolo::fw {
namespace {

[[noreturn]] void fail(StatusCode code, const std::string& path, const std::string& what,
                       const std::string& format = "idx") {
  throw Error(Status(code, format + " file '" + path + "': " + what));
}

uint32_t be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

bool valid_type(uint8_t t) {
  return t == 0x08 || t == 0x09 || t == 0x0B || t == 0x0C || t == 0x0D || t == 0x0E;
}

struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};

}  // namespace

int idx_type_size(IdxType type) {
  switch (type) {
    case IdxType::kUInt8:
    case IdxType::kInt8:
      return 1;
    case IdxType::kInt16:
      return 2;
    case IdxType::kInt32:
    case IdxType::kFloat32:
      return 4;
    case IdxType::kFloat64:
      return 8;
  }
  return 0;
}

const char* idx_type_name(IdxType type) {
  switch (type) {
    case IdxType::kUInt8:
      return "uint8";
    case IdxType::kInt8:
      return "int8";
    case IdxType::kInt16:
      return "int16";
    case IdxType::kInt32:
      return "int32";
    case IdxType::kFloat32:
      return "float32";
    case IdxType::kFloat64:
      return "float64";
  }
  return "unknown";
}

int64_t IdxArray::numel() const {
  // A zero dimension empties the array whatever the others are: read_idx accepts such a file
  // even when the other dimensions' product would overflow (a fuzzer found it).
  if (std::find(dims.begin(), dims.end(), 0) != dims.end()) return 0;
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

std::vector<uint8_t> read_maybe_gzip(const std::string& path, const std::string& format) {
  // gzread passes non-gzip files through unchanged, so one code path reads both forms.
  std::unique_ptr<gzFile_s, GzCloser> f(gzopen(path.c_str(), "rb"));
  if (!f) {
    fail(StatusCode::kIoError, path, std::string("cannot open: ") + std::strerror(errno), format);
  }
  gzbuffer(f.get(), 1 << 17);
  std::vector<uint8_t> out;
  constexpr size_t kChunk = 1 << 20;
  for (;;) {
    const size_t old = out.size();
    out.resize(old + kChunk);
    const int got = gzread(f.get(), out.data() + old, static_cast<unsigned>(kChunk));
    if (got < 0) {
      const int saved_errno = errno;
      int err = 0;
      const char* msg = gzerror(f.get(), &err);
      // For system errors gzerror's text repeats the path; strerror is enough.
      fail(StatusCode::kIoError, path,
           (err == Z_ERRNO ? "read failed after " : "corrupt gzip stream after ") +
               std::to_string(old) +
               " decompressed bytes: " + (err == Z_ERRNO ? std::strerror(saved_errno) : msg),
           format);
    }
    out.resize(old + static_cast<size_t>(got));
    if (static_cast<size_t>(got) < kChunk) break;
  }
  // A gzip stream cut short returns the bytes so far; only gzerror tells it was truncated.
  int err = 0;
  const char* msg = gzerror(f.get(), &err);
  if (err != Z_OK && err != Z_STREAM_END) {
    fail(StatusCode::kIoError, path,
         "truncated or corrupt gzip stream after " + std::to_string(out.size()) +
             " decompressed bytes: " + msg,
         format);
  }
  return out;
}

IdxArray read_idx(const std::string& path) {
  const std::vector<uint8_t> bytes = read_maybe_gzip(path);
  const size_t size = bytes.size();
  auto ends = [&](size_t offset, const std::string& expected) {
    fail(StatusCode::kInvalidArgument, path,
         "offset " + std::to_string(offset) + ": expected " + expected + ", file ends after " +
             std::to_string(size) + " bytes");
  };
  if (size < 4) ends(0, "4-byte IDX magic (00 00 type ndim)");
  if (bytes[0] != 0 || bytes[1] != 0) {
    fail(StatusCode::kInvalidArgument, path,
         "offset 0: expected IDX magic starting with two zero bytes, got " +
             std::to_string(bytes[0]) + " " + std::to_string(bytes[1]));
  }
  if (!valid_type(bytes[2])) {
    fail(StatusCode::kInvalidArgument, path,
         "offset 2: expected element type 0x08, 0x09, 0x0B, 0x0C, 0x0D or 0x0E, got " +
             std::to_string(bytes[2]));
  }
  const int ndim = bytes[3];
  if (ndim < 1 || ndim > 8) {
    fail(StatusCode::kInvalidArgument, path,
         "offset 3: expected 1 to 8 dimensions, got " + std::to_string(ndim));
  }
  IdxArray out;
  out.type = static_cast<IdxType>(bytes[2]);
  const size_t header = 4 + 4 * static_cast<size_t>(ndim);
  if (size < header) ends(4, std::to_string(ndim) + " big-endian uint32 dimension sizes");
  std::string shape;
  // Overflow guard: the product is bounded by what could follow in memory.
  uint64_t numel = 1;
  for (int d = 0; d < ndim; ++d) {
    const uint32_t dim = be32(bytes.data() + 4 + 4 * d);
    out.dims.push_back(dim);
    numel = dim == 0 ? 0 : (numel > size / dim ? size + 1 : numel * dim);
    shape += (d ? " x " : "") + std::to_string(dim);
  }
  const int esize = idx_type_size(out.type);
  const uint64_t want = numel > size ? UINT64_MAX : numel * static_cast<uint64_t>(esize);
  const std::string what = "element data (" + shape + " " + idx_type_name(out.type) + ")";
  if (size - header < want) {
    ends(header,
         (want == UINT64_MAX ? std::string("more") : std::to_string(want)) + " bytes of " + what);
  }
  if (size - header > want) {
    fail(StatusCode::kInvalidArgument, path,
         "offset " + std::to_string(header + want) + ": expected end of file after " + what +
             ", found " + std::to_string(size - header - want) + " trailing bytes");
  }
  out.data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(header), bytes.end());
  if (esize > 1) {
    for (size_t i = 0; i < out.data.size(); i += esize) {
      std::reverse(out.data.begin() + i, out.data.begin() + i + esize);
    }
  }
  return out;
}

void write_idx(const std::string& path, const IdxArray& array, bool gzip) {
  std::vector<uint8_t> bytes = {0, 0, static_cast<uint8_t>(array.type),
                                static_cast<uint8_t>(array.dims.size())};
  for (int64_t d : array.dims) {
    const auto v = static_cast<uint32_t>(d);
    for (int s = 24; s >= 0; s -= 8) bytes.push_back(static_cast<uint8_t>(v >> s));
  }
  const int esize = idx_type_size(array.type);
  const size_t header = bytes.size();
  bytes.insert(bytes.end(), array.data.begin(), array.data.end());
  if (esize > 1) {
    for (size_t i = header; i + esize <= bytes.size(); i += esize) {
      std::reverse(bytes.begin() + i, bytes.begin() + i + esize);
    }
  }
  if (gzip) {
    std::unique_ptr<gzFile_s, GzCloser> f(gzopen(path.c_str(), "wb"));
    if (!f) fail(StatusCode::kIoError, path, std::string("cannot create: ") + std::strerror(errno));
    if (!bytes.empty() &&
        gzwrite(f.get(), bytes.data(), static_cast<unsigned>(bytes.size())) == 0) {
      fail(StatusCode::kIoError, path, "gzip write failed");
    }
    if (gzclose(f.release()) != Z_OK) fail(StatusCode::kIoError, path, "gzip close failed");
    return;
  }
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (!f) fail(StatusCode::kIoError, path, std::string("cannot create: ") + std::strerror(errno));
  if (std::fwrite(bytes.data(), 1, bytes.size(), f.get()) != bytes.size()) {
    fail(StatusCode::kIoError, path, "write failed");
  }
  if (std::fclose(f.release()) != 0) fail(StatusCode::kIoError, path, "close failed");
}

}  // namespace kolo::fw
