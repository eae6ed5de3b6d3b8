#include "framework/data/cifar_reader.h"

#include "framework/data/idx_reader.h"
#include "kolo/status.h"

namespace kolo::fw {
namespace {

[[noreturn]] void fail(const std::string& path, size_t offset, const std::string& what) {
  throw Error(Status::InvalidArgument("cifar10 file '" + path + "': offset " +
                                      std::to_string(offset) + ": " + what));
}

void append(const std::string& path, CifarArray& out) {
  const std::vector<uint8_t> bytes = read_maybe_gzip(path, "cifar10");
  const size_t size = bytes.size();
  if (size == 0) {
    fail(path, 0, "expected at least one 3073-byte record (1 label + 3072 pixels), file is empty");
  }
  const size_t records = size / kCifarRecordBytes;
  if (size % kCifarRecordBytes != 0) {
    fail(path, records * kCifarRecordBytes,
         "expected a 3073-byte record (1 label + 3072 pixels), file ends after " +
             std::to_string(size) + " bytes");
  }
  out.images.reserve(out.images.size() + records * kCifarImageBytes);
  for (size_t r = 0; r < records; ++r) {
    const uint8_t* rec = bytes.data() + r * kCifarRecordBytes;
    if (rec[0] >= kCifar10Classes) {
      fail(path, r * kCifarRecordBytes,
           "expected a label in [0, 10), got " + std::to_string(rec[0]));
    }
    out.labels.push_back(rec[0]);
    out.images.insert(out.images.end(), rec + 1, rec + kCifarRecordBytes);
  }
  out.count += static_cast<int64_t>(records);
}

}  // namespace

CifarArray read_cifar10(const std::string& path) {
  CifarArray out;
  append(path, out);
  return out;
}

CifarArray read_cifar10(const std::vector<std::string>& paths) {
  if (paths.empty()) throw Error(Status::InvalidArgument("read_cifar10: paths must not be empty"));
  CifarArray out;
  for (const auto& p : paths) append(p, out);
  return out;
}

}  // namespace kolo::fw
