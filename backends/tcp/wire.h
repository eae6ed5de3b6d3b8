// Wire framing of the tcp backend's data lane. Every message posted with isend travels as one
// or more frames: a 16-byte header followed by the payload bytes. Messages longer than the
// frame bound are split into frames of at most that many bytes; both sides compute the same
// split from the message length, so the receiver always knows the exact length to expect.
//
// Header layout (little-endian):
//   bytes 0..3   magic    kFrameMagic ("KLF1"): catches a peer that is not Kolo or a stream that
//                         lost sync
//   bytes 4..7   reserved must be zero (room for flags without a new magic)
//   bytes 8..15  length   payload bytes that follow this header
//
// Frames do not mark message boundaries for the receiver: ops::Channel promises a byte stream per
// (sender, receiver) pair, and the ops/ algorithms rely on it (e.g. the ring sends a chunk as one
// message and receives it as several segments). So a receive takes the next bytes of the stream,
// across frame boundaries, and a frame's length is checked against the bound, not against the
// posted receive. The receiver never allocates from a wire length: payloads are read straight
// into the posted buffers, and at most one header's worth of bytes is ever read ahead.
// These are pure functions (no I/O) so that the checks are unit-tested directly.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "kolo/status.h"

namespace kolo::tcp {

inline constexpr size_t kFrameHeaderBytes = 16;
inline constexpr uint32_t kFrameMagic = 0x31464c4b;  // "KLF1" read as little-endian bytes
// Default bound on one frame's payload (KOLO_TCP_MAX_FRAME overrides it, see tcp_backend.h).
inline constexpr uint64_t kDefaultMaxFrameBytes = uint64_t{1} << 30;

using FrameHeader = std::array<uint8_t, kFrameHeaderBytes>;

// Encodes the header of a frame that carries `length` payload bytes.
FrameHeader encode_frame_header(uint64_t length);

// Validates a received header against the frame bound `max_length`. Returns the payload length
// on success; otherwise IoError describing what was wrong: a header shorter than
// kFrameHeaderBytes (truncated), a wrong magic or non-zero reserved field (malformed), or a
// length of 0 or above max_length (oversized; senders never send empty frames).
Result<uint64_t> decode_frame_header(std::span<const uint8_t> header, uint64_t max_length);

// The payload length of the frame that starts at byte `offset` of a message of `message_bytes`
// bytes split at `max_length` (> 0). A message of 0 bytes sends no frame at all.
uint64_t frame_length(uint64_t message_bytes, uint64_t offset, uint64_t max_length);

}  // namespace kolo::tcp
