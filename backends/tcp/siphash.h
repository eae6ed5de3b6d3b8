// SipHash-2-4 (Aumasson and Bernstein, 2012): a keyed 64-bit hash, implemented here because the
// project uses no crypto library. The tcp handshake builds its message authentication on it
// (see auth.h for what that does and does not protect against).
#pragma once

#include <cstdint>
#include <span>

namespace kolo::tcp {

struct SipKey {
  uint64_t k0 = 0;
  uint64_t k1 = 0;
};

// SipHash-2-4 of `data` under `key`. Matches the reference implementation's test vectors.
uint64_t siphash24(const SipKey& key, std::span<const uint8_t> data);

}  // namespace kolo::tcp
