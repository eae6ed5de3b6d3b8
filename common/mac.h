// Message authentication under the job's shared secret, used by every authenticated channel of
// Kolo: the rendezvous store (rendezvous/tcp_store.h) and the connection handshake of the tcp and
// shm backends (common/auth.h).
//
// The MAC is a 128-bit tag built from two SipHash-2-4 computations under independent 128-bit
// keys derived from the secret. SipHash is a pseudorandom function designed for exactly this use
// (short messages, secret key); the two halves make a blind forgery a 2^-64 guess at worst per
// attempt, and every failed attempt costs the attacker the connection. It is not a vetted
// protocol library: docs/security.md states the threat model and its limits (no encryption;
// a weak secret can be guessed offline from a recorded handshake).
//
// Pure functions (no I/O), thread-safe; unit-tested in common/auth_test.cc.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "common/siphash.h"

namespace kolo {

inline constexpr size_t kNonceBytes = 16;
inline constexpr size_t kTagBytes = 16;
using Nonce = std::array<uint8_t, kNonceBytes>;
using Tag = std::array<uint8_t, kTagBytes>;

struct AuthKey {
  SipKey a;
  SipKey b;
};

// Derives the MAC keys from the job secret (any bytes, possibly empty).
AuthKey derive_auth_key(std::string_view secret);
// A key for one connection: a function of `key`, a purpose label and both sides' fresh nonces,
// so that what one connection carries means nothing on another (no replay across connections).
AuthKey derive_session_key(const AuthKey& key, std::string_view label, const Nonce& first,
                           const Nonce& second);
// The 128-bit tag of `message` under `key`.
Tag auth_tag(const AuthKey& key, std::span<const uint8_t> message);
// Compares tags (or nonces) in time independent of where they differ.
bool tags_equal(const Tag& x, const Tag& y);
// A fresh nonce from std::random_device.
Nonce random_nonce();

}  // namespace kolo
