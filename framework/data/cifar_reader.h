// Reader for the CIFAR-10 binary batches (data_batch_1.bin .. data_batch_5.bin, test_batch.bin
// from https://www.cs.toronto.edu/~kriz/cifar.html).
//
// Layout: a sequence of 3073-byte records, each one label byte (0..9) followed by 3072 pixel
// bytes: the 1024 red values of the 32x32 image row-major, then the 1024 green, then the blue
// (so the pixels are already channel-major, CHW). A file may be gzip-compressed.
//
// Errors: read_cifar10 throws kolo::Error naming the file, the byte offset and what was
// expected, e.g. "cifar10 file 'b.bin': offset 3073: expected a 3073-byte record (1 label +
// 3072 pixels), file ends after 4000 bytes" or "... offset 6146: expected a label in [0, 10),
// got 12". IoError when the file cannot be read; InvalidArgument for bad content.
// Thread-safety: no shared state.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kolo::fw {

inline constexpr int kCifarImageBytes = 3 * 32 * 32;
inline constexpr int kCifarRecordBytes = 1 + kCifarImageBytes;
inline constexpr int kCifar10Classes = 10;

struct CifarArray {
  int64_t count = 0;
  std::vector<uint8_t> images;  // count x 3 x 32 x 32, CHW per image
  std::vector<uint8_t> labels;  // count values in [0, 10)
};

// Reads one batch file. An empty file is an error (a batch has at least one record).
CifarArray read_cifar10(const std::string& path);
// Reads several batch files and concatenates them in the given order.
CifarArray read_cifar10(const std::vector<std::string>& paths);

}  // namespace kolo::fw
