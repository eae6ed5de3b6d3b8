// Helpers shared by the collective algorithms (internal to ops/).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "common/enforce.h"
#include "common/knobs.h"
#include "kolo/status.h"
#include "ops/channel.h"
#include "ops/collectives.h"

namespace kolo::ops {

// Requests that must finish before the buffers they borrow may be reused or released. The
// destructor waits for any still outstanding (ignoring their status), so that an early error
// return never leaves a transfer writing into, or reading from, memory the caller takes back.
class Pending {
 public:
  explicit Pending(Channel& channel) : channel_(channel) {}
  Pending(const Pending&) = delete;
  Pending& operator=(const Pending&) = delete;
  ~Pending() { drain(); }

  void add(Request request) {
    if (request.completion()) requests_.push_back(std::move(request));
  }
  // Waits for all; returns the first error, with context "<op>: <verb> rank <peer>".
  Status wait_all(std::string_view op, std::string_view verb, int peer);
  void drain();

 private:
  Channel& channel_;
  std::vector<Request> requests_;
};

// Waits for `request`; on failure adds "<op>: <verb> rank <peer>". An empty request is OK.
Status wait_for(Channel& channel, const Request& request, std::string_view op,
                std::string_view verb, int peer);

// Splits `count` elements into `parts` nearly equal blocks (the first count % parts blocks
// get one element more).
std::vector<int64_t> split_evenly(int64_t count, int parts);
// Exclusive prefix sums: offsets[i] = sum(counts[0..i)).
std::vector<int64_t> offsets_of(const std::vector<int64_t>& counts);

// Segment length in elements for a segment size in bytes (at least one element).
inline int64_t segment_elems(size_t segment_bytes, size_t elem_size) {
  const size_t n = segment_bytes / elem_size;
  return n == 0 ? 1 : static_cast<int64_t>(n);
}

int64_t sum_of(const std::vector<int64_t>& counts);

// Adds "<op>: <verb> rank <peer>" to a transport error so that it names the peer.
Status with_peer(Status status, std::string_view op, std::string_view verb, int peer);

// The segment size of the algorithms whose signature carries no tuning: KOLO_RING_SEGMENT's
// registry default.
inline size_t default_segment_bytes() { return KnobSet::defaults().size(KnobId::kRingSegment); }

}  // namespace kolo::ops
