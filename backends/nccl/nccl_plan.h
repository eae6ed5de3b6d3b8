// What one rank of an nccl collective moves: whether the whole operation is empty (no NCCL call
// at all) and how many elements this rank's input and output hold. Pure functions of the counts
// (no CUDA, no NCCL), so that the decision is unit-tested without a GPU (nccl_plan_test.cc).
//
// Note [Empty collectives]
// NCCL refuses a null buffer even for zero elements ("sendbuff (nil) is not a valid pointer"
// under NCCL_CHECK_POINTERS, and argument checks vary by version), and NcclBackend aborts the
// communicator on any refused call (settle(): the peers' side would wait for this rank), so an
// empty CUDA tensor, whose data pointer may be null (Backend::validate_buffer allows it), would
// end the job. Two cases:
//  - Nothing moves on any rank: the call returns OK (or the backend's sticky failure) before
//    NCCL, the communicator, a group or the stream are touched. Every rank decides alike: the
//    counts are the response's, the same on every rank (allreduce's and broadcast's count,
//    allgather's and reducescatter's per-rank counts, a fused batch's pieces). Alltoall is
//    point-to-point: a rank that neither sends nor receives is no party to any peer's transfer
//    (what a peer sends it is its recv count, zero), so it skips on its own counts alone while
//    the others exchange among themselves.
//  - Other ranks move data but this rank's input or output holds zero elements (a per-rank
//    count of zero in allgather, alltoall or reducescatter): NCCL is called as usual, with the
//    backend's small stand-in device allocation in place of the empty buffer (buffer_or()), so
//    that no null pointer ever reaches it. NCCL reads and writes nothing there: the count of
//    every call on it is zero, or it is an ncclReduce's recvbuff on a rank that is not the root.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <vector>

#include "backends/backend.h"

namespace kolo::nccl {

struct RankPart {
  bool empty = true;   // nothing moves on any rank: no NCCL call, the call returns OK
  bool equal = true;   // every rank's count is the same: the NCCL collective, not grouped p2p
  int64_t input = 0;   // elements of this rank's input buffer
  int64_t output = 0;  // elements of this rank's output buffer
};

// allreduce (in and out `count`) and broadcast (the one buffer, `count`).
RankPart plan_allreduce(int64_t count);
// A fused batch: empty when every piece is; input and output the sum of the pieces' counts.
RankPart plan_allreduce_pieces(const std::vector<AllreducePiece>& pieces);
// allgather: this rank's input counts[rank]; its output every rank's block.
RankPart plan_allgather(const std::vector<int64_t>& counts, int rank);
// alltoall: this rank's input the sum of send_counts, its output the sum of recv_counts; empty
// when both are zero (Note [Empty collectives]: this rank only; equal is not used).
RankPart plan_alltoall(const std::vector<int64_t>& send_counts,
                       const std::vector<int64_t>& recv_counts);
// reducescatter: this rank's input every rank's block; its output counts[rank].
RankPart plan_reducescatter(const std::vector<int64_t>& counts, int rank);

// `buffer`, or `stand_in` when it holds no elements (the caller's pointer may then be null).
template <typename T>
T* buffer_or(T* buffer, int64_t elements, T* stand_in) {
  return elements > 0 ? buffer : stand_in;
}

}  // namespace kolo::nccl
