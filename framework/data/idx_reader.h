// Reader for the IDX format of MNIST and Fashion-MNIST (http://yann.lecun.com/exdb/mnist/),
// plain or gzip-compressed (detected from the content, not the name).
//
// IDX layout (all integers big-endian):
//   offset 0: two zero bytes, 1 byte element type, 1 byte number of dimensions D (1..8)
//   offset 4: D uint32 dimension sizes
//   offset 4+4D: the elements, row-major, each big-endian
// Element types: 0x08 uint8, 0x09 int8, 0x0B int16, 0x0C int32, 0x0D float32, 0x0E float64.
//
// Errors: read_idx throws kolo::Error with a message naming the file, the byte offset (in the
// decompressed stream for .gz) and what was expected, e.g.
//   "idx file 'x.gz': offset 16: expected 784 bytes of element data (1 x 28 x 28 uint8), file
//    ends after 100 bytes"
// Code IoError for files that cannot be opened or whose gzip stream is corrupt; InvalidArgument
// for content that is not valid IDX.
// Thread-safety: read_idx has no shared state.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kolo::fw {

enum class IdxType : uint8_t {
  kUInt8 = 0x08,
  kInt8 = 0x09,
  kInt16 = 0x0B,
  kInt32 = 0x0C,
  kFloat32 = 0x0D,
  kFloat64 = 0x0E,
};

// Bytes per element of an IDX type.
int idx_type_size(IdxType type);
const char* idx_type_name(IdxType type);

struct IdxArray {
  IdxType type = IdxType::kUInt8;
  std::vector<int64_t> dims;
  // The elements in host byte order (multi-byte types are converted from big-endian).
  std::vector<uint8_t> data;

  int64_t numel() const;
};

// Reads a whole IDX file, gzip or raw. Trailing bytes after the elements are an error.
IdxArray read_idx(const std::string& path);

// Reads a whole file into memory, inflating it when it starts with the gzip magic (1f 8b).
// Throws IoError "<format> file '<path>': ..." for open failures and corrupt or truncated gzip
// streams.
std::vector<uint8_t> read_maybe_gzip(const std::string& path, const std::string& format = "idx");

// Writes an IDX file (gzip-compressed when `gzip`), the inverse of read_idx. For tests and
// tools that produce small data sets. Throws IoError on failure.
void write_idx(const std::string& path, const IdxArray& array, bool gzip);

}  // namespace kolo::fw
