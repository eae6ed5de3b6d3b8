// Connection authentication between two ranks: a mutual challenge/response over the job's
// secret, run on every new connection before it carries any data. The tcp backend runs it on
// each of its connections, the shm backend on the local socket that hands out its segment.
// It lives in common/, beside the MAC it is built on, so that each backend includes it from
// here rather than from another backend's folder.
//
//   connector -> acceptor  Hello     {magic, version, rank, size, nonce_c}
//   acceptor  -> connector Challenge {magic, version, rank, size, nonce_a, tag_a}
//   connector -> acceptor  Proof     {magic, accept, tag_c}
//   acceptor  -> connector Verdict   {magic, accept}
//
// tag_a = MAC(secret, "acceptor" | binding | Hello | acceptor's rank, size, nonce_a) and
// tag_c = MAC(secret, "connector" | the same transcript). Each side checks the other's tag, so
// each proves it knows the secret without sending it, and the fresh nonces on both sides mean an
// old transcript cannot be replayed. The role labels stop a tag from being reflected back.
//
// Channel binding: `binding` is what each side believes about the connection, computed by each
// side on its own and never sent: the store prefix (which job, which plane) and the TCP
// endpoints of the connector and the acceptor as this side's socket reports them (shm binds the
// job's plane and the socket's name instead: backends/shm/shm_segment.cc). A relay that
// passes the messages through unchanged holds two connections with other endpoints, so the two
// ranks compute different bindings and each rejects the other's tag. The transcript also yields
// the connection's session key (session_key()), which authenticates what follows the handshake
// (the same-host offer in backends/tcp/tcp_connect.cc).
//
// The MAC and the nonces are common/mac.h's; docs/security.md states the threat model.
// Pure functions (no I/O), unit-tested in auth_test.cc.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "common/mac.h"
#include "kolo/status.h"

namespace kolo {

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
// rank) or another protocol version.
Result<Hello> decode_hello(std::span<const uint8_t> bytes);
Result<Challenge> decode_challenge(std::span<const uint8_t> bytes);
Result<Proof> decode_proof(std::span<const uint8_t> bytes);
Result<Verdict> decode_verdict(std::span<const uint8_t> bytes);

// The acceptor's tag over the binding, the Hello it received and its own rank, size and nonce.
Tag acceptor_tag(const AuthKey& key, std::string_view binding, const Hello& hello,
                 const Challenge& challenge);
// The connector's tag over the same transcript (challenge.tag is not part of it).
Tag connector_tag(const AuthKey& key, std::string_view binding, const Hello& hello,
                  const Challenge& challenge);
// The key of one authenticated connection: fresh for each, known only to its two ends.
AuthKey session_key(const AuthKey& key, const Hello& hello, const Challenge& challenge);

}  // namespace kolo
