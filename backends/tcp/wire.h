// Wire framing of the tcp backend's data lane. Every message posted with isend travels as one
// or more frames: a 16-byte header followed by the payload bytes. Messages longer than the
// frame bound are split into frames of at most that many bytes; both sides compute the same
// split from the message length, so the receiver always knows the exact length to expect.
//
// Header layout (little-endian):
//   bytes 0..3   magic    kFrameMagic ("KLF1"): catches a peer that is not Kolo or a stream that
//                         lost sync
//   bytes 4..7   flags    0, or kFrameTagged: an 8-byte tag follows the payload
//                         (KOLO_TCP_INTEGRITY; every frame of a channel has the same flags)
//   bytes 8..15  length   payload bytes that follow this header
//
// Tagged frames (KOLO_TCP_INTEGRITY=1): the payload is followed by
// SipHash-2-4(k, le64(seq) | header | payload), where k is the 128-bit key of this direction of
// the connection (derived from the handshake's session key, tcp_channel.cc) and seq counts the
// frames sent in that direction from 0. The sequence number is never sent: a frame that is
// altered, replayed, reordered or dropped fails the receiver's check. The receiver reads a
// tagged frame into its own buffer and hands bytes to receives only once the tag matches, so a
// tagged frame is at most kTaggedFrameBytes.
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

#include "common/mac.h"
#include "kolo/status.h"

namespace kolo::tcp {

inline constexpr size_t kFrameHeaderBytes = 16;
inline constexpr uint32_t kFrameMagic = 0x31464c4b;  // "KLF1" read as little-endian bytes
inline constexpr uint32_t kFrameTagged = 1;
inline constexpr size_t kFrameTagBytes = 8;
inline constexpr uint64_t kTaggedFrameBytes = uint64_t{256} << 10;

using FrameHeader = std::array<uint8_t, kFrameHeaderBytes>;
using FrameTag = std::array<uint8_t, kFrameTagBytes>;

// Encodes the header of a frame that carries `length` payload bytes.
FrameHeader encode_frame_header(uint64_t length, uint32_t flags = 0);

// Validates a received header against the frame bound `max_length` and the flags this side
// expects. Returns the payload length on success; otherwise IoError describing what was wrong:
// a header shorter than kFrameHeaderBytes (truncated), a wrong magic or unknown flags
// (malformed), flags other than `expected_flags` (KOLO_TCP_INTEGRITY differs between the ranks,
// or the tag was stripped on the way: the message says "integrity"), or a length of 0 or above
// max_length (oversized; senders never send empty frames).
Result<uint64_t> decode_frame_header(std::span<const uint8_t> header, uint64_t max_length,
                                     uint32_t expected_flags = 0);

// The SipHash key of the frames `from` sends to `to` on a connection whose handshake gave
// `session` (auth.h): each direction has its own, so a frame cannot be reflected to its sender.
SipKey frame_key(const AuthKey& session, int from, int to);
// The tag of a direction's frame number `seq`: SipHash-2-4 over le64(seq), header and payload.
FrameTag frame_tag(const SipKey& key, uint64_t seq, const FrameHeader& header,
                   const uint8_t* payload, uint64_t length);

// The payload length of the frame that starts at byte `offset` of a message of `message_bytes`
// bytes split at `max_length` (> 0). A message of 0 bytes sends no frame at all.
uint64_t frame_length(uint64_t message_bytes, uint64_t offset, uint64_t max_length);

}  // namespace kolo::tcp
