// Note [Ring schedule]
// Rank r sends only to its right neighbour r+1 and receives only from its left neighbour r-1.
// Reduce-scatter: at step s (0 <= s <= P-2) rank r receives block b = r-s-2 (mod P) and adds
// its own contribution. Block b was sent by rank r-1, which at step s-1 had itself just
// accumulated it, so after step s block b carries the contributions of ranks b+1 .. r: at the
// last step (s = P-2) rank r receives block r with the contributions of every other rank and
// adds its own, leaving the complete result for block r. Each received block is forwarded at
// the next step; instead of waiting for the whole block, each segment is sent on as soon as it
// has been reduced, so the transfer of one segment overlaps the reduction of the next and the
// steps pipeline into one another.
// Allgather: at step s rank r receives block r-s-1 from the left and forwards it at step s+1;
// every block travels once around the ring. Because each (sender, receiver) byte stream is
// ordered and both sides walk the same schedule, segments need no tags.
#include "ops/ring.h"

#include <algorithm>

#include "ops/detail.h"
#include "ops/reduce.h"

namespace kolo::ops {

namespace {
int mod(int a, int p) { return ((a % p) + p) % p; }
}  // namespace

Status ring_reduce_scatter(Channel& channel, char* buf, const std::vector<int64_t>& offsets,
                           const std::vector<int64_t>& counts, DataType dtype, ReduceOp op,
                           char* scratch, int64_t segment, std::string_view what) {
  const int p = channel.size();
  const int r = channel.rank();
  if (p == 1) return Status::Ok();
  const int left = mod(r - 1, p);
  const int right = mod(r + 1, p);
  const size_t es = dtype_size(dtype);
  char* slot[2] = {scratch, scratch + static_cast<size_t>(segment) * es};

  Pending sends(channel);
  {
    const int b = mod(r - 1, p);
    if (counts[b] > 0)
      sends.add(channel.isend(right, buf + offsets[b] * es, static_cast<size_t>(counts[b]) * es));
  }
  for (int s = 0; s <= p - 2; ++s) {
    const int b = mod(r - s - 2, p);
    const int64_t n = counts[b];
    char* block = buf + offsets[b] * es;
    const int64_t nseg = (n + segment - 1) / segment;
    auto seg_len = [&](int64_t k) { return std::min(segment, n - k * segment); };
    Request next;
    if (nseg > 0) next = channel.irecv(left, slot[0], static_cast<size_t>(seg_len(0)) * es);
    for (int64_t k = 0; k < nseg; ++k) {
      Request current = std::move(next);
      // Post the next segment's receive before reducing this one; it lands in the other slot,
      // whose previous contents were reduced in the last iteration.
      if (k + 1 < nseg)
        next = channel.irecv(left, slot[(k + 1) % 2], static_cast<size_t>(seg_len(k + 1)) * es);
      Status st = wait_for(channel, current, what, "receive from", left);
      if (!st.ok()) {
        if (next.completion()) (void)channel.wait(next);
        return st;
      }
      const int64_t m = seg_len(k);
      char* dst = block + k * segment * es;
      reduce_into(dtype, op, dst, slot[k % 2], m);
      if (s < p - 2) sends.add(channel.isend(right, dst, static_cast<size_t>(m) * es));
    }
  }
  return sends.wait_all(what, "send to", right);
}

Status ring_allgather(Channel& channel, char* buf, const std::vector<int64_t>& offsets,
                      const std::vector<int64_t>& counts, size_t es, int64_t segment,
                      std::string_view op) {
  const int p = channel.size();
  const int r = channel.rank();
  if (p == 1) return Status::Ok();
  const int left = mod(r - 1, p);
  const int right = mod(r + 1, p);

  Pending sends(channel);
  if (counts[r] > 0)
    sends.add(channel.isend(right, buf + offsets[r] * es, static_cast<size_t>(counts[r]) * es));
  for (int s = 0; s <= p - 2; ++s) {
    const int b = mod(r - s - 1, p);
    const int64_t n = counts[b];
    char* block = buf + offsets[b] * es;
    const int64_t nseg = (n + segment - 1) / segment;
    auto seg_bytes = [&](int64_t k) {
      return static_cast<size_t>(std::min(segment, n - k * segment)) * es;
    };
    Request next;
    if (nseg > 0) next = channel.irecv(left, block, seg_bytes(0));
    for (int64_t k = 0; k < nseg; ++k) {
      Request current = std::move(next);
      char* dst = block + k * segment * es;
      if (k + 1 < nseg) next = channel.irecv(left, dst + segment * es, seg_bytes(k + 1));
      Status st = wait_for(channel, current, op, "receive from", left);
      if (!st.ok()) {
        if (next.completion()) (void)channel.wait(next);
        return st;
      }
      // Forward as soon as it arrives: the right neighbour needs this block at the next step.
      if (s < p - 2) sends.add(channel.isend(right, dst, seg_bytes(k)));
    }
  }
  return sends.wait_all(op, "send to", right);
}

}  // namespace kolo::ops
