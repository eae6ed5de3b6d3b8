// Broadcast. Ranks are renumbered relative to the root (v = rank - root mod P) so the root is
// always v = 0.
// - Small messages: binomial tree. v receives from v minus its lowest set bit, then sends to
//   v + 2^k for every 2^k below that bit (the root: below P). ceil(log2 P) latencies.
// - Large messages: pipelined chain 0 -> 1 -> ... -> P-1. Each rank forwards every segment
//   as soon as it arrives, so the time is about (P - 1 + segments) segment transfers: close
//   to one full transfer of the data when it has many segments.
#include <algorithm>

#include "ops/collectives.h"
#include "ops/detail.h"

namespace kolo::ops {

namespace {

constexpr const char* kOp = "broadcast";
// Below this size latency dominates and the tree wins; above, the chain's bandwidth does.
constexpr size_t kChainMinBytes = 64 * 1024;

Status binomial_tree(Channel& channel, char* data, size_t bytes, int root) {
  const int p = channel.size();
  const int v = (channel.rank() - root + p) % p;
  auto real = [&](int vr) { return (vr + root) % p; };
  int mask = 1;
  while (mask < p) {
    if (v & mask) {
      KOLO_RETURN_IF_ERROR(with_peer(channel.recv(real(v - mask), data, bytes), kOp, "receive from",
                                     real(v - mask)));
      break;
    }
    mask <<= 1;
  }
  Pending sends(channel);
  int last = -1;
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (v + mask < p) {
      sends.add(channel.isend(real(v + mask), data, bytes));
      last = real(v + mask);
    }
  }
  return sends.wait_all(kOp, "send to", last);
}

Status pipelined_chain(Channel& channel, char* data, size_t bytes, int root) {
  const int p = channel.size();
  const int v = (channel.rank() - root + p) % p;
  const int prev = (channel.rank() - 1 + p) % p;
  const int next = (channel.rank() + 1) % p;
  const bool has_next = v + 1 < p;
  Pending sends(channel);
  if (v == 0) {
    sends.add(channel.isend(next, data, bytes));
    return sends.wait_all(kOp, "send to", next);
  }
  const size_t seg = default_segment_bytes();
  const size_t nseg = (bytes + seg - 1) / seg;
  auto len = [&](size_t k) { return std::min(seg, bytes - k * seg); };
  Request pending = channel.irecv(prev, data, len(0));
  for (size_t k = 0; k < nseg; ++k) {
    Request current = std::move(pending);
    if (k + 1 < nseg) pending = channel.irecv(prev, data + (k + 1) * seg, len(k + 1));
    Status st = wait_for(channel, current, kOp, "receive from", prev);
    if (!st.ok()) {
      if (pending.completion()) (void)channel.wait(pending);
      return st;
    }
    if (has_next) sends.add(channel.isend(next, data + k * seg, len(k)));
  }
  return sends.wait_all(kOp, "send to", next);
}

}  // namespace

Status broadcast(Channel& channel, void* data, int64_t count, DataType dtype, int root) {
  const int p = channel.size();
  KOLO_ENFORCE(root >= 0 && root < p, "root " << root << ", size " << p);
  KOLO_ENFORCE(count >= 0 && (data != nullptr || count == 0), "count " << count);
  if (count == 0 || p == 1) return Status::Ok();
  const size_t bytes = static_cast<size_t>(count) * dtype_size(dtype);
  char* buf = static_cast<char*>(data);
  if (bytes < kChainMinBytes) return binomial_tree(channel, buf, bytes, root);
  return pipelined_chain(channel, buf, bytes, root);
}

}  // namespace kolo::ops
