// SHA-256 (FIPS 180-4) of a byte stream, for train_fashion_mnist --print-checksum: a digest of
// the final parameters that users can compare across runs and machines with standard tools.
// Not constant-time, not for secrets. A Sha256 is a value; one thread at a time.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace kolo::example {

class Sha256 {
 public:
  Sha256();
  // Appends `n` bytes.
  void update(const void* data, size_t n);
  // The digest of everything appended, as 64 lowercase hex digits. Ends the stream: call it once.
  std::string hex_digest();

 private:
  void block(const unsigned char* p);

  std::array<uint32_t, 8> h_;
  std::array<unsigned char, 64> buf_{};
  size_t used_ = 0;     // bytes in buf_
  uint64_t total_ = 0;  // bytes appended
};

}  // namespace kolo::example
