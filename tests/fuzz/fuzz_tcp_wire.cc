// The tcp backend's bytes from the network (backends/tcp): frame headers and the four
// handshake messages. A message that decodes must encode to bytes that decode to it again.
#include <algorithm>
#include <span>

#include "backends/tcp/tcp_knobs.h"
#include "backends/tcp/wire.h"
#include "common/auth.h"
#include "fuzz_input.h"

namespace {

// decode(bytes) accepted: its encoding must decode again, to a message with the same encoding.
template <typename Message>
void check_round_trip(kolo::Result<Message> (*decode)(std::span<const uint8_t>),
                      std::span<const uint8_t> bytes) {
  auto decoded = decode(bytes);
  if (!decoded.ok()) return;
  const auto encoded = kolo::encode(*decoded);
  auto again = decode(encoded);
  FUZZ_CHECK(again.ok());
  const auto re_encoded = kolo::encode(*again);
  FUZZ_CHECK(std::equal(encoded.begin(), encoded.end(), re_encoded.begin()));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kolo::tcp;
  // The bound of a job that leaves KOLO_TCP_MAX_FRAME unset.
  static const uint64_t kMaxFrame = kolo::KnobSet::defaults().size(kolo::tcp_knobs::kMaxFrame);
  const std::span<const uint8_t> bytes(data, size);
  if (auto length = decode_frame_header(bytes, kMaxFrame); length.ok()) {
    FUZZ_CHECK(*length > 0 && *length <= kMaxFrame);
    auto again = decode_frame_header(encode_frame_header(*length), kMaxFrame);
    FUZZ_CHECK(again.ok() && *again == *length);
  }
  // Tagged frames (KOLO_TCP_INTEGRITY): the same bounds, and the tag's flag round-trips.
  if (auto length = decode_frame_header(bytes, kTaggedFrameBytes, kFrameTagged); length.ok()) {
    FUZZ_CHECK(*length > 0 && *length <= kTaggedFrameBytes);
    auto again = decode_frame_header(encode_frame_header(*length, kFrameTagged), kTaggedFrameBytes,
                                     kFrameTagged);
    FUZZ_CHECK(again.ok() && *again == *length);
  }
  check_round_trip(&kolo::decode_hello, bytes);
  check_round_trip(&kolo::decode_challenge, bytes);
  check_round_trip(&kolo::decode_proof, bytes);
  check_round_trip(&kolo::decode_verdict, bytes);
  return 0;
}
