// The TcpStore wire format: encoding and decoding of request and response frames. Shared by
// the server and the client; pure functions, so the decoder is tested on hostile bytes alone.
// The format itself is documented in tcp_store.h (Note [TcpStore wire format]).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/mac.h"
#include "kolo/status.h"

namespace kolo::tcp_store {

enum class Op : uint8_t { kSet = 1, kGet = 2, kWait = 3, kAdd = 4, kCheck = 5 };
enum class Reply : uint8_t { kOk = 0, kTimeout = 1, kError = 2 };

// Largest body (with its tag) a peer may announce; anything larger closes the connection.
inline constexpr uint32_t kMaxFrameBytes = (64u << 20) + (1u << 20);
// Most keys one wait() may name.
inline constexpr uint32_t kMaxWaitKeys = 1u << 16;
// Connections that have not yet proven the secret; at the cap the oldest one is dropped.
inline constexpr size_t kMaxUnauthenticated = 64;
// The time a connection has to prove the secret before the server drops it.
inline constexpr std::chrono::seconds kAuthLimit{10};
// How long the server waits before accepting again after accept failed (e.g. EMFILE).
inline constexpr std::chrono::milliseconds kAcceptPause{100};
// Server-side waits are clamped to this, so a hostile timeout cannot overflow a timer.
inline constexpr uint64_t kMaxTimeoutMs = 7ull * 24 * 3600 * 1000;

struct Request {
  Op op = Op::kSet;
  std::vector<std::string> keys;  // one key, except for wait
  std::string value;              // set
  int64_t delta = 0;              // add
  uint64_t timeout_ms = 0;        // get, wait
};

struct Response {
  Reply reply = Reply::kOk;
  std::string value;                 // get
  int64_t number = 0;                // add: new value; check: 0 or 1
  std::vector<std::string> missing;  // timeout
  uint8_t error_code = 0;            // error: a kolo::StatusCode
  std::string error_message;         // error
};

// Frame = 4-byte big-endian body length + body. These return the whole frame.
std::string encode_request(const Request& r);
std::string encode_response(Op op, const Response& r);
// Body decoders; nullopt when the bytes are not exactly one well-formed message.
std::optional<Request> decode_request(const std::string& body);
std::optional<Response> decode_response(Op op, const std::string& body);
// Reads the length prefix of a frame header.
uint32_t decode_length(const unsigned char header[4]);

// The handshake (Note [TcpStore authentication] in tcp_store.h): fixed-size messages.
inline constexpr size_t kHelloBytes = 4 + kNonceBytes;              // "KSA1", client nonce
inline constexpr size_t kChallengeBytes = kNonceBytes + kTagBytes;  // server nonce, server tag
inline constexpr size_t kProofBytes = kTagBytes;                    // client tag
inline constexpr size_t kVerdictBytes = 1;                          // 1 accepted, 0 refused
std::array<uint8_t, kHelloBytes> encode_hello(const Nonce& client);
// The client's nonce; nullopt when the bytes do not start with the magic (not a Kolo client).
std::optional<Nonce> decode_hello(std::span<const uint8_t> bytes);
// What the server and the client prove: knowledge of the job key, over both fresh nonces.
Tag server_tag(const AuthKey& job, const Nonce& client, const Nonce& server);
Tag client_tag(const AuthKey& job, const Nonce& client, const Nonce& server);

// The integrity of one authenticated connection, one per side: every frame carries a tag over
// its direction, its sequence number on the connection and its body, under a key of this
// connection alone, so a frame cannot be forged, altered, replayed, reordered or reflected.
// Not thread-safe (a connection carries one request at a time).
class FrameMac {
 public:
  FrameMac(const AuthKey& job, const Nonce& client, const Nonce& server, bool server_side);
  // Appends the tag to a frame as encode_request/encode_response return it, and fixes its length.
  std::string seal(std::string frame);
  // Checks and strips the tag at the end of a received body (the frame without its length);
  // false when it does not match (the connection must then be dropped).
  bool open(std::string& body);

 private:
  Tag tag(uint8_t direction, uint64_t sequence, std::string_view body) const;
  AuthKey key_;
  bool server_side_;
  uint64_t sent_ = 0;
  uint64_t received_ = 0;
};

}  // namespace kolo::tcp_store
