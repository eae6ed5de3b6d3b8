#include "common/mac.h"

#include <random>
#include <vector>

namespace kolo {

AuthKey derive_auth_key(std::string_view secret) {
  // Four fixed, unrelated keys turn the secret into 256 bits of MAC key material.
  const std::span<const uint8_t> s(reinterpret_cast<const uint8_t*>(secret.data()), secret.size());
  AuthKey k;
  k.a.k0 = siphash24({0x6b6f6c6f2d6b6579ULL, 0x0000000000000001ULL}, s);
  k.a.k1 = siphash24({0x6b6f6c6f2d6b6579ULL, 0x0000000000000002ULL}, s);
  k.b.k0 = siphash24({0x6b6f6c6f2d6b6579ULL, 0x0000000000000003ULL}, s);
  k.b.k1 = siphash24({0x6b6f6c6f2d6b6579ULL, 0x0000000000000004ULL}, s);
  return k;
}

AuthKey derive_session_key(const AuthKey& key, std::string_view label, const Nonce& first,
                           const Nonce& second) {
  // Two tags under the job key, told apart by a final byte, give the 256 bits of the new key.
  std::vector<uint8_t> m(label.begin(), label.end());
  m.insert(m.end(), first.begin(), first.end());
  m.insert(m.end(), second.begin(), second.end());
  m.push_back(1);
  const Tag x = auth_tag(key, m);
  m.back() = 2;
  const Tag y = auth_tag(key, m);
  auto word = [](const Tag& t, size_t at) {
    uint64_t v = 0;
    for (size_t i = 0; i < 8; ++i) v |= uint64_t{t[at + i]} << (8 * i);
    return v;
  };
  return AuthKey{{word(x, 0), word(x, 8)}, {word(y, 0), word(y, 8)}};
}

Tag auth_tag(const AuthKey& key, std::span<const uint8_t> message) {
  const uint64_t a = siphash24(key.a, message);
  const uint64_t b = siphash24(key.b, message);
  Tag t{};
  for (int i = 0; i < 8; ++i) {
    t[i] = static_cast<uint8_t>(a >> (8 * i));
    t[8 + i] = static_cast<uint8_t>(b >> (8 * i));
  }
  return t;
}

bool tags_equal(const Tag& x, const Tag& y) {
  uint8_t diff = 0;
  for (size_t i = 0; i < kTagBytes; ++i) diff |= static_cast<uint8_t>(x[i] ^ y[i]);
  return diff == 0;
}

Nonce random_nonce() {
  std::random_device rd;
  Nonce n{};
  for (size_t i = 0; i < kNonceBytes; i += 4) {
    const uint32_t w = rd();
    for (size_t j = 0; j < 4; ++j) n[i + j] = static_cast<uint8_t>(w >> (8 * j));
  }
  return n;
}

}  // namespace kolo
