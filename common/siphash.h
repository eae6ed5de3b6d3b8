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

}  // namespace kolo
