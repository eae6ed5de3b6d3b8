// SipHash-2-4 (Aumasson and Bernstein, 2012): a keyed 64-bit hash, implemented here because the
// project uses no crypto library. common/mac.h builds the message authentication of the store
// and of the tcp backend on it (docs/security.md says what that does and does not protect).
#pragma once

#include <cstdint>
#include <span>

namespace kolo {

struct SipKey {
  uint64_t k0 = 0;
  uint64_t k1 = 0;
};

// SipHash-2-4 of `data` under `key`. Matches the reference implementation's test vectors.
uint64_t siphash24(const SipKey& key, std::span<const uint8_t> data);

// SipHash-2-4 over a message given in pieces (e.g. a frame header, then its payload where it
// lies): update() any number of times, then finish() once. The result equals siphash24() of the
// concatenation. Not thread-safe; cheap to copy.
class SipHasher {
 public:
  explicit SipHasher(const SipKey& key);
  void update(std::span<const uint8_t> data);
  uint64_t finish();

 private:
  void absorb(uint64_t m);
  uint64_t v0_, v1_, v2_, v3_;
  uint64_t tail_ = 0;    // the bytes of an unfinished 8-byte block, little-endian
  uint64_t length_ = 0;  // bytes absorbed so far (only its low byte is used)
};

}  // namespace kolo
