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
// The receiver never allocates from a wire length: payloads are read straight into the buffer
// the caller posted, and decode_frame_header() rejects any length other than the one expected.
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

// Validates a received header. `expected_length` is the length the posted receive needs for
// this frame; `max_length` the frame bound. Returns the payload length on success; otherwise
// IoError describing what was wrong: a header shorter than kFrameHeaderBytes (truncated), a
// wrong magic or non-zero reserved field (malformed), a length above max_length (oversized),
// or a length different from expected_length (mismatch: the ranks disagree on message sizes).
Result<uint64_t> decode_frame_header(std::span<const uint8_t> header, uint64_t expected_length,
                                     uint64_t max_length);

// The payload length of the frame that starts at byte `offset` of a message of `message_bytes`
// bytes split at `max_length` (> 0). A message of 0 bytes is one empty frame.
uint64_t frame_length(uint64_t message_bytes, uint64_t offset, uint64_t max_length);

}  // namespace kolo::tcp
