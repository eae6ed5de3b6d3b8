#include "backends/tcp/wire.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "common/siphash.h"

namespace kolo::tcp {
namespace {

void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void put_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{p[i]} << (8 * i);
  return v;
}
uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}
std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

}  // namespace

FrameHeader encode_frame_header(uint64_t length, uint32_t flags) {
  FrameHeader h{};
  put_u32(h.data(), kFrameMagic);
  put_u32(h.data() + 4, flags);
  put_u64(h.data() + 8, length);
  return h;
}

Result<uint64_t> decode_frame_header(std::span<const uint8_t> header, uint64_t max_length,
                                     uint32_t expected_flags) {
  if (header.size() < kFrameHeaderBytes)
    return Status::IoError("truncated frame header: got " + std::to_string(header.size()) + " of " +
                           std::to_string(kFrameHeaderBytes) + " bytes");
  const uint32_t magic = get_u32(header.data());
  if (magic != kFrameMagic)
    return Status::IoError("malformed frame: magic is " + hex32(magic) + ", expected " +
                           hex32(kFrameMagic) +
                           " (the peer is not a Kolo tcp channel, or the stream lost sync)");
  const uint32_t flags = get_u32(header.data() + 4);
  if ((flags & ~kFrameTagged) != 0)
    return Status::IoError("malformed frame: flags are " + hex32(flags) +
                           ", expected 0 or 0x00000001 (incompatible Kolo version?)");
  if (flags != expected_flags)
    return Status::IoError(
        expected_flags == kFrameTagged
            ? std::string("integrity check failed: a frame without the integrity tag arrived "
                          "(KOLO_TCP_INTEGRITY is off on the peer, or the frame was altered on "
                          "the way)")
            : std::string("integrity tags are on at the peer but off here: KOLO_TCP_INTEGRITY "
                          "must match on every rank"));
  const uint64_t length = get_u64(header.data() + 8);
  if (length > max_length)
    return Status::IoError("oversized frame: length " + std::to_string(length) +
                           " bytes exceeds the frame bound of " + std::to_string(max_length) +
                           " bytes (KOLO_TCP_MAX_FRAME must match on every rank)");
  if (length == 0)
    return Status::IoError("malformed frame: length 0 (senders never send empty frames)");
  return length;
}

SipKey frame_key(const AuthKey& session, int from, int to) {
  const std::string label = "kolo-tcp frames " + std::to_string(from) + " -> " + std::to_string(to);
  const Tag t = auth_tag(
      session,
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(label.data()), label.size()));
  SipKey k;
  for (int i = 0; i < 8; ++i) {
    k.k0 |= uint64_t{t[i]} << (8 * i);
    k.k1 |= uint64_t{t[8 + i]} << (8 * i);
  }
  return k;
}

FrameTag frame_tag(const SipKey& key, uint64_t seq, const FrameHeader& header,
                   const uint8_t* payload, uint64_t length) {
  SipHasher h(key);
  std::array<uint8_t, 8> s{};
  for (int i = 0; i < 8; ++i) s[i] = static_cast<uint8_t>(seq >> (8 * i));
  h.update(s);
  h.update(header);
  h.update(std::span<const uint8_t>(payload, length));
  const uint64_t v = h.finish();
  FrameTag tag{};
  for (int i = 0; i < 8; ++i) tag[i] = static_cast<uint8_t>(v >> (8 * i));
  return tag;
}

uint64_t frame_length(uint64_t message_bytes, uint64_t offset, uint64_t max_length) {
  return std::min(message_bytes - offset, max_length);
}

}  // namespace kolo::tcp
