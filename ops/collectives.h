// The collective algorithms, as pure functions over buffers and a Channel. Backends without
// native collectives (tcp, shm) compose these; unit tests run them over ThreadChannel.
//
// Common contract:
// - Every rank of the channel calls the same function with matching arguments (same count,
//   dtype, reduction, root, and consistent per-rank counts).
// - Preconditions: the arguments are valid as Backend's public methods check them
//   (backends/backend.h validates once, before calling these): a valid dtype and reduction,
//   counts >= 0, per-rank count vectors of channel.size() non-negative entries, non-null
//   buffers where a count is > 0, 0 <= root < size. The algorithms do not return errors for
//   these; the cheap ones are KOLO_ENFORCE'd (a violation is a bug in the caller: Error
//   (Internal) thrown before any byte is sent).
// - Counts are in elements of `dtype`.
// - Buffers are borrowed for the duration of the call only.
// - `workspace` is scratch memory owned by the caller and reused across calls so that steady
//   state allocates nothing. It is not thread-safe: one call at a time per workspace.
// - On a transport failure the function returns its Status (naming the peer); output buffers
//   then hold unspecified values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kolo/status.h"
#include "kolo/types.h"
#include "ops/channel.h"

namespace kolo::ops {

// Grows on demand and keeps its memory. Aligned to 64 bytes.
class Workspace {
 public:
  Workspace() = default;
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  ~Workspace();
  // A buffer of at least `bytes` bytes; the pointer stays valid until the next call to get().
  void* get(size_t bytes);

 private:
  void* data_ = nullptr;
  size_t capacity_ = 0;
};

// Algorithm choice and tuning for allreduce: the values of KOLO_RING_THRESHOLD and
// KOLO_RING_SEGMENT, whose registry rows hold the measured defaults (docs/benchmarks.md); a
// backend fills this from the job's knobs (backends/channel_backend.h: allreduce_tuning()), so
// there is no default here.
struct AllreduceTuning {
  // Messages of at most this many bytes use recursive doubling; larger ones use the ring.
  size_t small_message_bytes = 0;
  // The ring pipelines each chunk in segments of this size, so the reduction of one
  // segment overlaps the transfer of the next. > 0.
  size_t segment_bytes = 0;
  // KOLO_DETERMINISTIC: every element is reduced in rank order (allreduce_rank_order), whatever
  // the message size; small_message_bytes then picks between its two algorithms instead.
  bool rank_order = false;
};

// In-place allreduce: on entry `data` holds this rank's `count` elements, on success the
// reduced result. Chooses the algorithm by message size.
Status allreduce(Channel& channel, void* data, int64_t count, DataType dtype,
                 const Reduction& reduction, Workspace& workspace, const AllreduceTuning& tuning);
// Reproducible (Note [Deterministic reduction] in deterministic.cc): every element is the left
// fold of the ranks' prescaled contributions in rank order, so the result's bits depend on the
// inputs and the rank count only (not on count, tuning or the element's offset). Up to
// tuning.small_message_bytes every rank exchanges its whole input with every other; larger
// messages take a direct reduce-scatter and the ring allgather.
Status allreduce_rank_order(Channel& channel, void* data, int64_t count, DataType dtype,
                            const Reduction& reduction, Workspace& workspace,
                            const AllreduceTuning& tuning);
// Bandwidth-optimal: a segmented, pipelined ring reduce-scatter followed by a ring allgather.
// Each rank sends 2(P-1)/P of the data.
Status allreduce_ring(Channel& channel, void* data, int64_t count, DataType dtype,
                      const Reduction& reduction, Workspace& workspace, size_t segment_bytes);
// Latency-optimal: log2(P) exchange rounds of the whole message (non-powers of two fold
// the extra ranks in first and out last).
Status allreduce_recursive_doubling(Channel& channel, void* data, int64_t count, DataType dtype,
                                    const Reduction& reduction, Workspace& workspace);

// Reduce-scatter: `input` holds sum(counts) elements on every rank; on success `output`
// holds the reduced block of counts[rank] elements that starts at sum(counts[0..rank)).
// rank_order (KOLO_DETERMINISTIC): each element is reduced in rank order, as
// allreduce_rank_order does, instead of in the ring's order.
Status reducescatter(Channel& channel, const void* input, void* output,
                     const std::vector<int64_t>& counts, DataType dtype, const Reduction& reduction,
                     Workspace& workspace, bool rank_order = false);

// Allgather with per-rank sizes: `input` holds counts[rank] elements; on success `output`
// holds every rank's input, concatenated in rank order (sum(counts) elements). `input`
// may alias its own slot in `output`.
Status allgatherv(Channel& channel, const void* input, void* output,
                  const std::vector<int64_t>& counts, DataType dtype);

// Broadcast of `count` elements from `root` into `data` on every rank.
Status broadcast(Channel& channel, void* data, int64_t count, DataType dtype, int root);

// All-to-all with splits: this rank sends send_counts[j] elements (taken in order from
// `input`) to rank j and receives recv_counts[j] elements from rank j (stored in order in
// `output`). send_counts on rank i must equal recv_counts[i] seen by each peer; the
// receiving side checks the lengths it is told and fails with Mismatch otherwise.
Status alltoallv(Channel& channel, const void* input, const std::vector<int64_t>& send_counts,
                 void* output, const std::vector<int64_t>& recv_counts, DataType dtype);

// Returns once every rank of the channel has entered the barrier.
Status barrier(Channel& channel);

}  // namespace kolo::ops
