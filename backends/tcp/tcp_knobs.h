// The tcp backend's knobs (KOLO_TCP_*): rows of the knob registry (common/knobs.h) that this
// folder declares, so that the backend's settings live with the backend. tcp_knobs.cc is data
// only and is compiled into the registry's library (kolo_backend(tcp ... KNOBS ...)), so kolorun
// and the README's table see these rows without linking the backend; the backend's code reads
// their values from the KnobSet that init() parsed (BackendContext::knobs), e.g.
// `knobs.size(tcp_knobs::kSocketBuffer)`. Defaults are written in the rows only.
//
// Thread-safety: constants.
#pragma once

#include "common/knobs.h"

namespace kolo {

namespace tcp_knobs {
extern const Knob kHost;          // KOLO_TCP_HOST: the address published to the peers
extern const Knob kSocketBuffer;  // KOLO_TCP_SOCKET_BUFFER: SO_SNDBUF and SO_RCVBUF
extern const Knob kMaxFrame;      // KOLO_TCP_MAX_FRAME: largest frame payload (job-wide)
extern const Knob kUnix;          // KOLO_TCP_UNIX: same-host peers switch to AF_UNIX
extern const Knob kIntegrity;     // KOLO_TCP_INTEGRITY: a MAC on every data frame (job-wide)
extern const Knob kSpin;          // KOLO_TCP_SPIN: how long a waiting rank polls
}  // namespace tcp_knobs

// The rows above and the tcp backend's retired names, for the registry (common/build_info.h).
BackendKnobs backend_knobs_tcp();

}  // namespace kolo
