#include "backends/tcp/wire.h"

#include <algorithm>
#include <cstdio>
#include <string>

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

FrameHeader encode_frame_header(uint64_t length) {
  FrameHeader h{};
  put_u32(h.data(), kFrameMagic);
  put_u32(h.data() + 4, 0);
  put_u64(h.data() + 8, length);
  return h;
}

Result<uint64_t> decode_frame_header(std::span<const uint8_t> header, uint64_t max_length) {
  if (header.size() < kFrameHeaderBytes)
    return Status::IoError("truncated frame header: got " + std::to_string(header.size()) + " of " +
                           std::to_string(kFrameHeaderBytes) + " bytes");
  const uint32_t magic = get_u32(header.data());
  if (magic != kFrameMagic)
    return Status::IoError("malformed frame: magic is " + hex32(magic) + ", expected " +
                           hex32(kFrameMagic) +
                           " (the peer is not a Kolo tcp channel, or the stream lost sync)");
  const uint32_t reserved = get_u32(header.data() + 4);
  if (reserved != 0)
    return Status::IoError("malformed frame: reserved field is " + hex32(reserved) +
                           ", expected 0 (incompatible Kolo version?)");
  const uint64_t length = get_u64(header.data() + 8);
  if (length > max_length)
    return Status::IoError("oversized frame: length " + std::to_string(length) +
                           " bytes exceeds the frame bound of " + std::to_string(max_length) +
                           " bytes (KOLO_TCP_MAX_FRAME must match on every rank)");
  if (length == 0)
    return Status::IoError("malformed frame: length 0 (senders never send empty frames)");
  return length;
}

uint64_t frame_length(uint64_t message_bytes, uint64_t offset, uint64_t max_length) {
  return std::min(message_bytes - offset, max_length);
}

}  // namespace kolo::tcp
