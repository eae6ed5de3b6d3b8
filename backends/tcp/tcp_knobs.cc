// The tcp backend's rows of the knob registry (see tcp_knobs.h). Data only: this file is
// compiled into kolo_common, so it may include nothing of the backend but its own header.
#include "backends/tcp/tcp_knobs.h"

namespace kolo {

namespace {

constexpr int64_t kKiB = 1024, kGiB = kKiB << 20, kTiB = kGiB << 10;
constexpr int64_t kNsPerSecond = 1'000'000'000;

using enum KnobKind;
using enum KnobScope;

}  // namespace

namespace tcp_knobs {

constexpr Knob kHost = {
    .name = "KOLO_TCP_HOST",
    .kind = kText,
    .category = KnobCategory::kBackend,
    .backend = "tcp",
    .default_doc = "127.0.0.1 on one host, else the first non-loopback IPv4 address",
    .help = "address the tcp backend publishes to its peers",
};
constexpr Knob kSocketBuffer = {
    .name = "KOLO_TCP_SOCKET_BUFFER",
    .kind = kSize,
    .category = KnobCategory::kBackend,
    .backend = "tcp",
    .default_text = "4MiB",
    .min = 4 * kKiB,
    .max = kGiB,
    .help = "SO_SNDBUF and SO_RCVBUF of each tcp socket",
};
// Job-wide: a frame larger than the receiver's bound is refused as malformed.
constexpr Knob kMaxFrame = {
    .name = "KOLO_TCP_MAX_FRAME",
    .kind = kSize,
    .category = KnobCategory::kBackend,
    .backend = "tcp",
    .scope = kJob,
    .default_text = "1GiB",
    .min = 1,
    .max = kTiB,
    .help = "largest frame payload; larger messages are split",
};
constexpr Knob kUnix = {
    .name = "KOLO_TCP_UNIX",
    .kind = kBool,
    .category = KnobCategory::kBackend,
    .backend = "tcp",
    .default_text = "1",
    .help =
        "same-host peers carry data over an AF_UNIX socket after the TCP handshake (`0`: "
        "TCP only)",
};
constexpr Knob kIntegrity = {
    .name = "KOLO_TCP_INTEGRITY",
    .kind = kBool,
    .category = KnobCategory::kBackend,
    .backend = "tcp",
    .scope = kJob,
    .default_text = "0",
    .help =
        "a keyed MAC (SipHash-2-4, per-connection key, frame sequence number) on every data "
        "frame: an altered, replayed or dropped frame fails the operation naming the peer "
        "(must match on all ranks; costs bandwidth, see docs/security.md)",
};
// 0 by default: spinning was slower on the shared 2-core VM.
constexpr Knob kSpin = {
    .name = "KOLO_TCP_SPIN",
    .kind = kDuration,
    .category = KnobCategory::kBackend,
    .backend = "tcp",
    .default_text = "0",
    .max = kNsPerSecond,
    .help = "how long a waiting rank polls its sockets before sleeping",
};

}  // namespace tcp_knobs

BackendKnobs backend_knobs_tcp() {
  using namespace tcp_knobs;
  static constexpr const Knob* kRows[] = {&kHost, &kSocketBuffer, &kMaxFrame,
                                          &kUnix, &kIntegrity,    &kSpin};
  // The tcp backend's names of the ring knobs, from before they served every channel backend.
  static constexpr RetiredKnob kRetired[] = {
      {"KOLO_TCP_SEGMENT", "KOLO_RING_SEGMENT"},
      {"KOLO_TCP_SMALL_MESSAGE", "KOLO_RING_THRESHOLD"},
  };
  return {kRows, kRetired};
}

}  // namespace kolo
