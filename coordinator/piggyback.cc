// Step 1 of a cycle with piggy-backed data: see Note [Piggy-back].
#include <algorithm>
#include <cstring>

#include "coordinator/fusion.h"
#include "coordinator/runtime.h"

// Note [Piggy-back]
// In steady state a small allreduce would cost two rounds: the bit-vector allreduce that
// finds it ready on every rank, then the data allreduce. In jobs of few ranks (size <=
// piggyback_max_ranks), step 1 instead allgathers a fixed-size message per rank:
//   [bits: 1 + cache.slot_limit() bytes, padded to 8][payload: piggyback_bytes, padded to 8]
// and every rank takes the element-wise minimum of the bits itself. A rank writes the input
// of a pending cache hit into its payload (in slot order, each padded to 8 bytes) when the
// cached response is a one-tensor CPU allreduce that still fits, and marks its bit 2 instead
// of 1. A slot whose minimum is 2 arrived with every rank's data: every rank reduces the
// inputs locally in rank order (so all get the identical result) and no data round runs. A
// minimum of 1 runs on the data backend as before; the payload is then simply unused.
// Every rank knows where rank r's payload for slot s starts by walking r's bits in slot
// order, since the cached responses (and so the sizes) are identical everywhere.
// The gathered message costs one exchange for 2 ranks (as the allreduce did), which is why
// piggy-backing is limited to small jobs: allgather steps grow with the ranks, allreduce
// steps with their logarithm.

namespace kolo::coord {

namespace {

size_t align8(size_t n) { return (n + 7) & ~size_t{7}; }

// Whether every rank would send this cached response's data along (when it fits).
bool piggybackable(const Response& p) {
  return p.kind == Response::Kind::kExecute && p.type == OpType::kAllreduce &&
         p.shapes.size() == 1 && p.device.is_cpu() && p.joined.empty();
}

}  // namespace

Status Runtime::gather_bits(size_t nbits) {
  const int size = topology_.size;
  const size_t head = align8(nbits);
  const size_t block = head + align8(config_.piggyback_bytes);
  gathered_.resize(block / 8 * static_cast<size_t>(size));
  if (gather_counts_.size() != static_cast<size_t>(size) ||
      gather_counts_[0] != static_cast<int64_t>(block))
    gather_counts_.assign(size, static_cast<int64_t>(block));
  auto* all = reinterpret_cast<uint8_t*>(gathered_.data());
  uint8_t* mine = all + static_cast<size_t>(topology_.rank) * block;
  std::memcpy(mine, bits_.data(), nbits);

  // This rank's payload: inputs of one-tensor CPU allreduces, in slot order, while they fit.
  std::sort(cached_.begin(), cached_.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  size_t used = head;
  for (const auto& [slot, e] : cached_) {
    const Response& p = cache_.response(slot);
    if (!piggybackable(p) || !e->inputs[0].device.is_cpu()) continue;
    const size_t bytes = response_bytes(p);
    if (used + align8(bytes) > block) continue;
    if (bytes > 0) std::memcpy(mine + used, e->inputs[0].data, bytes);
    mine[1 + slot] = 2;
    used += align8(bytes);
  }

  KOLO_RETURN_IF_ERROR(control_->allgather(mine, all, DataType::kUInt8, gather_counts_)
                           .with_context("negotiation (cache bits and piggy-backed data)"));
  for (size_t i = 0; i < nbits; ++i) {
    uint8_t m = all[i];
    for (int r = 1; r < size; ++r) m = std::min(m, all[static_cast<size_t>(r) * block + i]);
    bits_[i] = m;
  }
  // A rank with nothing pending (byte 0 is 2) came on its heartbeat: its next cycle starts the
  // moment it submits, so this rank's unmatched work should be waiting for it in the next cycle
  // rather than sleeping out the batching window.
  idle_peer_ = false;
  for (int r = 0; r < size; ++r) idle_peer_ |= all[static_cast<size_t>(r) * block] == 2;

  // Slots every rank sent data for, with each rank's input, found by walking the bits.
  std::vector<size_t> cursor(size, head);
  std::vector<Response> ready;
  std::vector<std::vector<const void*>> inputs;
  for (size_t s = 0; s + 1 < nbits; ++s) {
    bool any = false;
    for (int r = 0; r < size && !any; ++r) any = all[static_cast<size_t>(r) * block + 1 + s] == 2;
    if (!any) continue;
    const size_t bytes = align8(response_bytes(cache_.response(s)));
    const bool everyone = bits_[1 + s] == 2;
    if (everyone) inputs.emplace_back(size);
    for (int r = 0; r < size; ++r) {
      const uint8_t* theirs = all + static_cast<size_t>(r) * block;
      if (theirs[1 + s] != 2) continue;
      if (cursor[r] + bytes > block)
        return Status::Internal("negotiation: rank " + std::to_string(r) +
                                "'s piggy-backed data overruns its message (slot " +
                                std::to_string(s) + ")");
      if (everyone) inputs.back()[r] = theirs + cursor[r];
      cursor[r] += bytes;
    }
    if (everyone) {
      ready.push_back(cache_.response(s));
      bits_[1 + s] = 0;  // done here: not for the data backend
    }
  }
  if (ready.empty()) return Status::Ok();
  std::vector<const Response*> refs;
  for (const auto& p : ready) refs.push_back(&p);
  std::vector<BatchItem> items = claim(refs);
  end_negotiate_spans(items);
  for (size_t i = 0; i < items.size(); ++i) executor_.reduce_gathered(items[i], inputs[i]);
  retire(items);
  return Status::Ok();
}

}  // namespace kolo::coord
