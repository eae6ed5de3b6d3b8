// Dissemination barrier: in round k rank r signals r + 2^k and waits for r - 2^k. After
// ceil(log2 P) rounds every rank has (transitively) heard from every other, so none can leave
// before all have entered. Works for any P, not only powers of two.
#include "ops/collectives.h"
#include "ops/detail.h"

namespace kolo::ops {

Status barrier(Channel& channel) {
  const int p = channel.size();
  const int r = channel.rank();
  for (int k = 1; k < p; k <<= 1) {
    const int to = (r + k) % p;
    const int from = (r - k + p) % p;
    const char token = 1;
    char got = 0;
    KOLO_RETURN_IF_ERROR(with_peer(channel.sendrecv(to, &token, 1, from, &got, 1), "barrier",
                                   "signal exchange with", from));
  }
  return Status::Ok();
}

}  // namespace kolo::ops
