// Note [Deterministic reduction]
// KOLO_DETERMINISTIC=1 promises that every reduction's result is a fixed function of the ranks'
// inputs and the rank count alone: not of the fusion threshold, the cycle time, the bucket
// size, the autotuner, the order and timing in which tensors become ready, the small-message
// switch, the segment or chunk sizes, or whether tcp or shm carries it.
//
// The rule. Every element is combined over the ranks as a left fold in rank order,
//   y = finish(((pre(x0) op pre(x1)) op pre(x2)) op ... op pre(x[P-1])),
// where pre is the prescale (ops::scale's arithmetic) and finish ops::finish_reduction (divide
// for kAverage, then the postscale). Each step is one call of the element-wise kernels of
// reduce.h on that element alone (a vectorised loop computes each lane as the scalar code
// would: IEEE addition, multiplication, `a < b ? a : b` are exact functions of their two
// operands; float16/bfloat16 round back after every step, on every path alike). So y depends
// only on the element's P inputs, and who computes it, in which chunk or segment, at which
// offset of which fusion buffer, does not matter. That is why ownership may follow the fusion
// buffer (a rank owns 1/P of whatever buffer it is handed): only the order of the operands of
// each element is fixed, never where an element lives.
//
// Why the ordinary algorithms break it. The ring (Note [Ring schedule]) starts block b's sum at
// rank b+1, so with three or more ranks an element's association depends on the block it falls
// in, that is on its offset in the fusion buffer: a different threshold or readiness order puts
// it elsewhere and changes the rounding. Recursive doubling associates in a butterfly that
// differs from the ring's, so the small-message switch changes bits too. (With two ranks both
// are x0 op x1 or x1 op x0, equal for sum and product, but not for min/max of -0/+0 or NaN.)
//
// The algorithms here (tcp and any other channel backend):
// - large messages: a direct reduce-scatter (every rank sends block q of its buffer straight to
//   its owner q, in one send; the owner receives the P-1 blocks segment by segment and folds
//   each segment of all P contributions in rank order), then the ring allgather, which only
//   copies. Each rank sends the same (P-1)/P of the data as the ring's reduce-scatter, over
//   P-1 links at once instead of one; the owner's fold reads P inputs per element, as the ring
//   does over its P-1 steps.
// - messages up to KOLO_RING_THRESHOLD: every rank sends its whole input to every other and
//   folds all P in rank order itself: one message latency, (P-1) times the data.
// The shm backend (backends/shm) reduces the same way in both its one-round and chunked paths:
// the owner of a share folds every rank's buffer in rank order. Both give the same bits for the
// same inputs, since each element sees the same sequence of kernel calls.
//
// mpi and nccl run their libraries' own algorithms, whose association we do not control (NCCL
// documents only that it is reproducible for a fixed configuration: the same ranks, GPUs,
// topology, NCCL version and buffer layout, which fusion changes); their registry entries say
// so (BackendEntry::rank_order) and create_backend refuses KOLO_DETERMINISTIC=1 with them.
#include "ops/deterministic.h"

#include <algorithm>
#include <cstring>

#include "ops/detail.h"
#include "ops/reduce.h"
#include "ops/ring.h"

namespace kolo::ops {

namespace {

// Waits for every request; on the first failure still waits for the rest (their buffers are
// the caller's) and returns that failure, naming the peer.
Status wait_each(Channel& channel, std::vector<Request>& requests, std::string_view what,
                 std::string_view verb) {
  Status first;
  for (size_t q = 0; q < requests.size(); ++q) {
    Status s = wait_for(channel, requests[q], what, verb, static_cast<int>(q));
    if (first.ok() && !s.ok()) first = std::move(s);
    requests[q] = Request();
  }
  return first;
}

// The small-message path: every rank folds every rank's whole input.
Status allreduce_all_to_all(Channel& channel, char* data, int64_t count, DataType dtype,
                            ReduceOp op, Workspace& workspace, std::string_view what) {
  const int p = channel.size();
  const int r = channel.rank();
  const size_t bytes = static_cast<size_t>(count) * dtype_size(dtype);
  char* slots = static_cast<char*>(workspace.get(bytes * static_cast<size_t>(p)));
  std::vector<Request> sends(static_cast<size_t>(p)), recvs(static_cast<size_t>(p));
  std::vector<const void*> sources(static_cast<size_t>(p));
  for (int q = 0; q < p; ++q) {
    sources[q] = q == r ? data : slots + bytes * static_cast<size_t>(q);
    if (q == r) continue;
    recvs[q] = channel.irecv(q, slots + bytes * static_cast<size_t>(q), bytes);
    sends[q] = channel.isend(q, data, bytes);
  }
  Status received = wait_each(channel, recvs, what, "receive from");
  // `data` is the fold's output: the sends that read it must be done first.
  Status sent = wait_each(channel, sends, what, "send to");
  KOLO_RETURN_IF_ERROR(received);
  KOLO_RETURN_IF_ERROR(sent);
  // Rank 0's slot is free to hold the partial sums, unless rank 0's input is `data` itself,
  // which is then also the output (reduce_in_order allows both).
  void* acc = r == 0 ? data : slots;
  reduce_in_order(dtype, op, data, sources, acc, count);
  return Status::Ok();
}

}  // namespace

Status rank_order_reduce_scatter(Channel& channel, char* buf, const std::vector<int64_t>& offsets,
                                 const std::vector<int64_t>& counts, DataType dtype, ReduceOp op,
                                 char* scratch, int64_t segment, std::string_view what) {
  const int p = channel.size();
  const int r = channel.rank();
  if (p == 1) return Status::Ok();
  const size_t es = dtype_size(dtype);
  // Two sets of P segment slots (this rank's own slot in each is unused): the next segment's
  // receives land in one set while the other is folded.
  auto slot = [&](int64_t set, int q) {
    return scratch + static_cast<size_t>((set % 2) * p + q) * static_cast<size_t>(segment) * es;
  };
  std::vector<Request> sends(static_cast<size_t>(p));
  for (int q = 0; q < p; ++q)
    if (q != r && counts[q] > 0)
      sends[q] = channel.isend(q, buf + offsets[q] * es, static_cast<size_t>(counts[q]) * es);

  const int64_t n = counts[r];
  const int64_t nseg = (n + segment - 1) / segment;
  auto seg_len = [&](int64_t k) { return std::min(segment, n - k * segment); };
  std::vector<Request> current(static_cast<size_t>(p)), next(static_cast<size_t>(p));
  auto post = [&](int64_t k, std::vector<Request>& into) {
    for (int q = 0; q < p; ++q)
      if (q != r) into[q] = channel.irecv(q, slot(k, q), static_cast<size_t>(seg_len(k)) * es);
  };
  if (nseg > 0) post(0, next);
  std::vector<const void*> sources(static_cast<size_t>(p));
  for (int64_t k = 0; k < nseg; ++k) {
    std::swap(current, next);
    if (k + 1 < nseg) post(k + 1, next);
    Status st = wait_each(channel, current, what, "receive from");
    if (!st.ok()) {
      (void)wait_each(channel, next, what, "receive from");
      (void)wait_each(channel, sends, what, "send to");
      return st;
    }
    char* dst = buf + (offsets[r] + k * segment) * static_cast<int64_t>(es);
    for (int q = 0; q < p; ++q) sources[q] = q == r ? dst : slot(k, q);
    reduce_in_order(dtype, op, dst, sources, r == 0 ? dst : slot(k, 0), seg_len(k));
  }
  return wait_each(channel, sends, what, "send to");
}

Status allreduce_rank_order(Channel& channel, void* data, int64_t count, DataType dtype,
                            const Reduction& reduction, Workspace& workspace,
                            const AllreduceTuning& tuning) {
  constexpr const char* kOp = "allreduce (deterministic)";
  KOLO_ENFORCE(count >= 0 && (data != nullptr || count == 0), "count " << count);
  KOLO_ENFORCE(tuning.segment_bytes > 0);
  if (count == 0) return Status::Ok();
  const int p = channel.size();
  const size_t es = dtype_size(dtype);
  char* buf = static_cast<char*>(data);

  scale(dtype, data, count, reduction.prescale);
  if (p > 1) {
    if (static_cast<size_t>(count) * es <= tuning.small_message_bytes) {
      KOLO_RETURN_IF_ERROR(
          allreduce_all_to_all(channel, buf, count, dtype, reduction.op, workspace, kOp));
    } else {
      const std::vector<int64_t> counts = split_evenly(count, p);
      const std::vector<int64_t> offsets = offsets_of(counts);
      const int64_t segment =
          std::min(segment_elems(tuning.segment_bytes, es), std::max<int64_t>(counts[0], 1));
      char* scratch = static_cast<char*>(
          workspace.get(2 * static_cast<size_t>(p) * static_cast<size_t>(segment) * es));
      KOLO_RETURN_IF_ERROR(rank_order_reduce_scatter(channel, buf, offsets, counts, dtype,
                                                     reduction.op, scratch, segment, kOp));
      KOLO_RETURN_IF_ERROR(ring_allgather(channel, buf, offsets, counts, es, segment, kOp));
    }
  }
  finish_reduction(dtype, reduction, data, count, p);
  return Status::Ok();
}

}  // namespace kolo::ops
