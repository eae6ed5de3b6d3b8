// The TcpStore wire format: encoding and decoding of request and response frames. Shared by
// the server and the client; pure functions, so the decoder is tested on hostile bytes alone.
// The format itself is documented in tcp_store.h (Note [TcpStore wire format]).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kolo/status.h"

namespace kolo::tcp_store {

enum class Op : uint8_t { kSet = 1, kGet = 2, kWait = 3, kAdd = 4, kCheck = 5 };
enum class Reply : uint8_t { kOk = 0, kTimeout = 1, kError = 2 };

// Largest body a peer may announce; anything larger closes the connection before reading it.
inline constexpr uint32_t kMaxFrameBytes = (64u << 20) + (1u << 20);
// Most keys one wait() may name.
inline constexpr uint32_t kMaxWaitKeys = 1u << 16;
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

}  // namespace kolo::tcp_store
