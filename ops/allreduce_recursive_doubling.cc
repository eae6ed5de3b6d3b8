// Note [Recursive doubling with a non-power-of-two group]
// Let P' be the largest power of two <= P and rem = P - P'. The first 2*rem ranks pair up:
// each even rank 2i sends its whole input to 2i+1, which folds it in, and then sits out. The
// P' remaining ranks ("new ranks" 0..P'-1: odd rank 2i+1 -> i, rank r >= 2*rem -> r - rem)
// run log2(P') rounds; in round k each exchanges its whole partial result with the new rank
// that differs in bit k and combines the two. After the last round all P' hold the full
// result, identical bit for bit because every op is commutative. Finally each odd rank below
// 2*rem sends the result back to its even partner. Cost: log2(P') + 2 message latencies.
#include "ops/collectives.h"
#include "ops/detail.h"
#include "ops/reduce.h"

namespace kolo::ops {

Status allreduce_recursive_doubling(Channel& channel, void* data, int64_t count, DataType dtype,
                                    const Reduction& reduction, Workspace& workspace) {
  constexpr const char* kOp = "allreduce_recursive_doubling";
  KOLO_ENFORCE(count >= 0 && (data != nullptr || count == 0), "count " << count);
  if (count == 0) return Status::Ok();
  const int p = channel.size();
  const int r = channel.rank();
  const size_t bytes = static_cast<size_t>(count) * dtype_size(dtype);

  scale(dtype, data, count, reduction.prescale);
  if (p > 1) {
    void* tmp = workspace.get(bytes);
    int p2 = 1;
    while (p2 * 2 <= p) p2 *= 2;
    const int rem = p - p2;

    int new_rank;
    if (r < 2 * rem) {
      if (r % 2 == 0) {
        KOLO_RETURN_IF_ERROR(with_peer(channel.send(r + 1, data, bytes), kOp, "send to", r + 1));
        new_rank = -1;
      } else {
        KOLO_RETURN_IF_ERROR(
            with_peer(channel.recv(r - 1, tmp, bytes), kOp, "receive from", r - 1));
        reduce_into(dtype, reduction.op, data, tmp, count);
        new_rank = r / 2;
      }
    } else {
      new_rank = r - rem;
    }

    if (new_rank >= 0) {
      for (int mask = 1; mask < p2; mask <<= 1) {
        const int partner_new = new_rank ^ mask;
        const int peer = partner_new < rem ? partner_new * 2 + 1 : partner_new + rem;
        KOLO_RETURN_IF_ERROR(with_peer(channel.sendrecv(peer, data, bytes, peer, tmp, bytes), kOp,
                                       "exchange with", peer));
        reduce_into(dtype, reduction.op, data, tmp, count);
      }
    }

    if (r < 2 * rem) {
      if (r % 2 == 1) {
        KOLO_RETURN_IF_ERROR(with_peer(channel.send(r - 1, data, bytes), kOp, "send to", r - 1));
      } else {
        KOLO_RETURN_IF_ERROR(
            with_peer(channel.recv(r + 1, data, bytes), kOp, "receive from", r + 1));
      }
    }
  }
  finish_reduction(dtype, reduction, data, count, p);
  return Status::Ok();
}

}  // namespace kolo::ops
