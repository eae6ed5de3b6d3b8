// Connection authentication for the tcp backend: a mutual challenge/response over the job's
// secret, run on every new connection before it carries any data.
//
//   connector -> acceptor  Hello     {magic, version, rank, size, nonce_c}
//   acceptor  -> connector Challenge {magic, version, rank, size, nonce_a, tag_a}
//   connector -> acceptor  Proof     {magic, accept, tag_c}
//   acceptor  -> connector Verdict   {magic, accept}
//
// tag_a = MAC(secret, "acceptor" | Hello | acceptor's rank, size, nonce_a) and
// tag_c = MAC(secret, "connector" | the same transcript). Each side checks the other's tag, so
// each proves it knows the secret without sending it, and the fresh nonces on both sides mean an
// old transcript cannot be replayed. The role labels stop a tag from being reflected back.
//
// The MAC is a 128-bit tag built from two SipHash-2-4 computations under keys derived from the
// secret. Threat model (documented on purpose): this defends against accidental cross-job
// connections (two jobs on one host, a stale address in the store) and casual misuse (a port
// scanner, a curious user). It is NOT a vetted cryptographic protocol: the traffic is neither
// encrypted nor integrity-protected after the handshake, so a determined attacker on the network
// path can read or hijack a connection. Use network isolation for that.
//
// Pure functions (no I/O), unit-tested in auth_test.cc.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "backends/tcp/siphash.h"
#include "kolo/status.h"

namespace kolo::tcp {

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
// The 128-bit tag of `message` under `key`.
Tag auth_tag(const AuthKey& key, std::span<const uint8_t> message);
// Compares tags in time independent of where they differ.
bool tags_equal(const Tag& x, const Tag& y);
// A fresh nonce from std::random_device.
Nonce random_nonce();

struct Hello {
  int32_t rank = 0;
  int32_t size = 0;
  Nonce nonce{};
};
struct Challenge {
  int32_t rank = 0;
  int32_t size = 0;
  Nonce nonce{};
  Tag tag{};
};
struct Proof {
  bool accept = false;
  Tag tag{};
};
struct Verdict {
  bool accept = false;
};

inline constexpr size_t kHelloBytes = 32;
inline constexpr size_t kChallengeBytes = 48;
inline constexpr size_t kProofBytes = 24;
inline constexpr size_t kVerdictBytes = 8;

std::array<uint8_t, kHelloBytes> encode(const Hello& m);
std::array<uint8_t, kChallengeBytes> encode(const Challenge& m);
std::array<uint8_t, kProofBytes> encode(const Proof& m);
std::array<uint8_t, kVerdictBytes> encode(const Verdict& m);

// Each decoder returns IoError when the bytes are too short, carry the wrong magic (not a Kolo
// tcp peer) or another protocol version.
Result<Hello> decode_hello(std::span<const uint8_t> bytes);
Result<Challenge> decode_challenge(std::span<const uint8_t> bytes);
Result<Proof> decode_proof(std::span<const uint8_t> bytes);
Result<Verdict> decode_verdict(std::span<const uint8_t> bytes);

// The acceptor's tag over the Hello it received and its own rank, size and nonce.
Tag acceptor_tag(const AuthKey& key, const Hello& hello, const Challenge& challenge);
// The connector's tag over the same transcript (challenge.tag is not part of it).
Tag connector_tag(const AuthKey& key, const Hello& hello, const Challenge& challenge);

}  // namespace kolo::tcp
