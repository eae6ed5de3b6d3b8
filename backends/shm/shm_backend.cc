#include "backends/shm/shm_backend.h"

#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <csignal>
#include <cstring>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include "backends/shm/piece_index.h"
#include "backends/shm/shm_knobs.h"
#include "backends/shm/shm_segment.h"
#include "ops/reduce.h"
#include "ops/stream_copy.h"

namespace kolo {

namespace {

using Clock = std::chrono::steady_clock;
using shm::BufferHeader;
using shm::Segment;

// A waiter first polls the peer's counter (a reply that is about to come is caught without a
// syscall), then polls while yielding its core until kYieldFor (on an oversubscribed host the
// peer gets to run, and this rank stays runnable instead of paying a wake-up), then sleeps on
// the futex, so an idle rank stops using its core within kYieldFor. Measured on the 2-core VM
// (docs/benchmarks.md): sleeping right after the polls made small allreduces 10-40x slower on
// average than polling with sched_yield, as Open MPI does when oversubscribed.
// The spin is bounded by time, not by a number of polls (a pause instruction takes 65 ns on
// that VM's AMD EPYC, a few ns to 140 ns elsewhere), and it is long only while every rank can
// have a core of its own: spinning pays only while the awaited rank runs on another core.
// With more ranks than cores it keeps the core from the rank it waits for: 4 ranks on 2 cores
// took 82 us for a 4 KiB allreduce with a 65 us spin (2.2x Open MPI), 7 us with a 1 us spin.
// With 2 ranks on 2 cores and other processes runnable, a 1 us spin made a 1 MiB allreduce
// 1-4x slower in half the runs (each sched_yield can give the core away for a time slice,
// while the peer's copy of a chunk takes tens of us); the long spin does not.
constexpr std::chrono::nanoseconds kSpinFor{50'000};
constexpr std::chrono::nanoseconds kSpinOversubscribedFor{1'000};
constexpr std::chrono::microseconds kYieldFor{200};
// A sleeping waiter wakes this often to check that the rank it waits for is alive.
constexpr long kSleepSliceNs = 5'000'000;

enum class Kind : uint32_t {
  kAllreduce = 1,
  kAllgather,
  kBroadcast,
  kAlltoall,
  kReducescatter,
  kBarrier
};

std::string kind_name(uint32_t kind) {
  switch (static_cast<Kind>(kind)) {
    case Kind::kAllreduce:
      return "allreduce";
    case Kind::kAllgather:
      return "allgather";
    case Kind::kBroadcast:
      return "broadcast";
    case Kind::kAlltoall:
      return "alltoall";
    case Kind::kReducescatter:
      return "reducescatter";
    case Kind::kBarrier:
      return "barrier";
  }
  return "unknown collective #" + std::to_string(kind);
}

// "allreduce of 10 float32 (sum)": a descriptor in words; every field may be a peer's garbage.
std::string describe(const BufferHeader& d) {
  std::string out = kind_name(d.kind) + " of " + std::to_string(d.count) + " ";
  out += is_valid_dtype(static_cast<int>(d.dtype))
             ? std::string(dtype_name(static_cast<DataType>(d.dtype)))
             : "dtype #" + std::to_string(d.dtype);
  const Kind k = static_cast<Kind>(d.kind);
  if (k == Kind::kAllreduce || k == Kind::kReducescatter)
    out += is_valid_reduce_op(static_cast<int>(d.op))
               ? " (" + std::string(reduce_op_name(static_cast<ReduceOp>(d.op))) + ")"
               : " (op #" + std::to_string(d.op) + ")";
  if (k == Kind::kBroadcast) out += " from root " + std::to_string(d.root);
  if (k == Kind::kAllgather || k == Kind::kReducescatter)
    out += " (per-rank counts hash " + std::to_string(d.counts_hash) + ")";
  return out;
}

uint64_t hash_counts(const std::vector<int64_t>& counts) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (int64_t c : counts) {
    h ^= static_cast<uint64_t>(c);
    h *= 1099511628211ull;
  }
  return h;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The number of elements in [begin, begin + len) that lie inside [0, total).
int64_t piece(int64_t total, int64_t begin, int64_t len) {
  return std::clamp<int64_t>(total - begin, 0, len);
}

bool reached(uint32_t value, uint32_t target) { return static_cast<int32_t>(value - target) >= 0; }

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Whether each of `ranks` ranks of this host can have a core of its own. kolorun and mpirun
// bind every rank to a CPU of its own when there are enough (a mask of one CPU on a host of
// several) and leave the mask whole otherwise; a CPU quota of a cgroup is not seen.
bool a_core_per_rank(int ranks) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return false;
  const int mine = CPU_COUNT(&set);
  if (mine == 1 && ::sysconf(_SC_NPROCESSORS_ONLN) > 1) return true;  // bound by the launcher
  return ranks <= mine;
}

long futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  // Not FUTEX_PRIVATE_FLAG: the word is shared between processes.
  return ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

class ShmBackend : public Backend {
 public:
  ShmBackend(std::unique_ptr<Segment> segment, int rank, std::chrono::milliseconds op_timeout,
             std::string op_timeout_knob, int64_t stream_from_bytes)
      : seg_(std::move(segment)),
        rank_(rank),
        size_(seg_->size()),
        chunk_(static_cast<int64_t>(seg_->chunk_bytes())),
        threshold_(std::min<int64_t>(static_cast<int64_t>(seg_->header().threshold_bytes), chunk_)),
        op_timeout_(op_timeout),
        op_timeout_knob_(std::move(op_timeout_knob)),
        spin_for_(a_core_per_rank(size_) ? kSpinFor : kSpinOversubscribedFor),
        stream_from_bytes_(stream_from_bytes),
        pidfds_(static_cast<size_t>(size_), -1) {
    for (int p = 0; p < size_; ++p)
      if (p != rank_)
        pidfds_[static_cast<size_t>(p)] =
            static_cast<int>(::syscall(SYS_pidfd_open, seg_->line(p).pid, 0));
  }
  ~ShmBackend() override {
    for (int fd : pidfds_)
      if (fd >= 0) ::close(fd);
  }

  std::string_view name() const override { return "shm"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

 protected:
  Status do_allreduce(const void* input, void* output, int64_t count, DataType dtype,
                      const Reduction& reduction) override {
    const AllreducePiece whole{input, output, count};
    return run_allreduce(std::span<const AllreducePiece>(&whole, 1), dtype, reduction);
  }

  bool has_allreduce_pieces() const override { return true; }
  Status do_allreduce_pieces(const std::vector<AllreducePiece>& pieces, DataType dtype,
                             const Reduction& reduction) override {
    return run_allreduce(pieces, dtype, reduction);
  }

  Status do_allgather(const void* input, void* output, DataType dtype,
                      const std::vector<int64_t>& counts) override {
    const size_t es = dtype_size(dtype);
    return run("allgather", [&]() -> Status {
      BufferHeader d = descriptor(Kind::kAllgather, dtype, sum(counts));
      d.counts_hash = hash_counts(counts);
      const int64_t per_use = chunk_ / static_cast<int64_t>(es);
      const int64_t uses = std::max<int64_t>(1, ceil_div(max(counts), per_use));
      std::vector<int64_t> offsets = exclusive_sums(counts);  // before the hot loop
      char* out = static_cast<char*>(output);
      char* mine = out + offsets[rank_] * es;
      if (mine != input && counts[rank_] > 0)
        std::memcpy(mine, input, static_cast<size_t>(counts[rank_]) * es);
      for (int64_t k = 0; k < uses; ++k) {
        KOLO_RETURN_IF_ERROR(begin_use());
        const int64_t first = k * per_use;
        const int64_t n = piece(counts[rank_], first, per_use);
        if (n > 0) std::memcpy(buffer(rank_), mine + first * es, static_cast<size_t>(n) * es);
        KOLO_RETURN_IF_ERROR(share(k, d));
        for (int p = 0; p < size_; ++p) {
          const int64_t m = piece(counts[p], first, per_use);
          if (p != rank_ && m > 0)
            std::memcpy(out + (offsets[p] + first) * es, buffer(p), static_cast<size_t>(m) * es);
        }
      }
      return Status::Ok();
    });
  }

  Status do_broadcast(void* data, int64_t count, DataType dtype, int root) override {
    const size_t es = dtype_size(dtype);
    return run("broadcast", [&]() -> Status {
      BufferHeader d = descriptor(Kind::kBroadcast, dtype, count);
      d.root = root;
      const int64_t per_use = chunk_ / static_cast<int64_t>(es);
      const int64_t uses = std::max<int64_t>(1, ceil_div(count, per_use));
      char* bytes = static_cast<char*>(data);
      for (int64_t k = 0; k < uses; ++k) {
        KOLO_RETURN_IF_ERROR(begin_use());
        const int64_t first = k * per_use;
        const size_t n = static_cast<size_t>(piece(count, first, per_use)) * es;
        if (rank_ == root && n > 0) std::memcpy(buffer(rank_), bytes + first * es, n);
        if (k == 0) {
          KOLO_RETURN_IF_ERROR(share(k, d));
        } else {
          publish(mark1());
          if (rank_ != root) KOLO_RETURN_IF_ERROR(wait_peer(root, mark1()));
        }
        if (rank_ != root && n > 0) std::memcpy(bytes + first * es, buffer(root), n);
      }
      return Status::Ok();
    });
  }

  Status do_alltoall(const void* input, void* output, DataType dtype,
                     const std::vector<int64_t>& send_counts,
                     const std::vector<int64_t>& recv_counts) override {
    const size_t es = dtype_size(dtype);
    return run("alltoall", [&]() -> Status {
      // Use 0 checks the counts: every rank's send counts go into its buffer, and each rank
      // compares the column addressed to it with its recv counts, then says so (verdict).
      KOLO_RETURN_IF_ERROR(begin_use());
      std::memcpy(buffer(rank_), send_counts.data(), sizeof(int64_t) * size_);
      KOLO_RETURN_IF_ERROR(share(0, descriptor(Kind::kAlltoall, dtype, 0)));
      std::string disagreement;
      int64_t largest = 0;
      for (int q = 0; q < size_; ++q) {
        for (int j = 0; j < size_; ++j) {
          int64_t sends = 0;  // rank q's send_counts[j]
          std::memcpy(&sends, buffer(q) + sizeof(int64_t) * j, sizeof sends);
          largest = std::max(largest, sends);
          if (j == rank_ && sends != recv_counts[q] && disagreement.empty())
            disagreement = "rank " + std::to_string(q) + " sends " + std::to_string(sends) +
                           " elements to rank " + std::to_string(rank_) + ", which expects " +
                           std::to_string(recv_counts[q]) + " (recv_counts[" + std::to_string(q) +
                           "])";
        }
      }
      header(rank_).verdict = disagreement.empty() ? 1 : 0;
      publish(mark2());
      KOLO_RETURN_IF_ERROR(wait_all(mark2()));
      if (!disagreement.empty()) return Status::Mismatch("shm alltoall: " + disagreement);
      for (int p = 0; p < size_; ++p)
        if (header(p).verdict != 1)
          return Status::Mismatch("shm alltoall: rank " + std::to_string(p) +
                                  " receives counts that disagree with what its peers send");

      const std::vector<int64_t> soff = exclusive_sums(send_counts);
      const std::vector<int64_t> roff = exclusive_sums(recv_counts);
      const char* in = static_cast<const char*>(input);
      char* out = static_cast<char*>(output);
      if (send_counts[rank_] > 0)
        std::memcpy(out + roff[rank_] * es, in + soff[rank_] * es,
                    static_cast<size_t>(send_counts[rank_]) * es);
      const int64_t region = region_elems(es);
      const int64_t uses = ceil_div(largest, region);
      for (int64_t k = 0; k < uses; ++k) {
        KOLO_RETURN_IF_ERROR(begin_use());
        const int64_t first = k * region;
        for (int j = 0; j < size_; ++j) {
          const int64_t n = piece(send_counts[j], first, region);
          if (j != rank_ && n > 0)
            std::memcpy(buffer(rank_) + j * region * es, in + (soff[j] + first) * es,
                        static_cast<size_t>(n) * es);
        }
        publish(mark1());
        KOLO_RETURN_IF_ERROR(wait_all(mark1()));
        for (int q = 0; q < size_; ++q) {
          const int64_t n = piece(recv_counts[q], first, region);
          if (q != rank_ && n > 0)
            std::memcpy(out + (roff[q] + first) * es, buffer(q) + rank_ * region * es,
                        static_cast<size_t>(n) * es);
        }
      }
      return Status::Ok();
    });
  }

  Status do_reducescatter(const void* input, void* output, DataType dtype,
                          const Reduction& reduction, const std::vector<int64_t>& counts) override {
    const size_t es = dtype_size(dtype);
    return run("reducescatter", [&]() -> Status {
      BufferHeader d = descriptor(Kind::kReducescatter, dtype, sum(counts));
      d.op = static_cast<uint32_t>(reduction.op);
      d.counts_hash = hash_counts(counts);
      const std::vector<int64_t> offsets = exclusive_sums(counts);
      const int64_t region = region_elems(es);
      const int64_t uses = std::max<int64_t>(1, ceil_div(max(counts), region));
      const char* in = static_cast<const char*>(input);
      char* out = static_cast<char*>(output);
      for (int64_t k = 0; k < uses; ++k) {
        KOLO_RETURN_IF_ERROR(begin_use());
        const int64_t first = k * region;
        for (int j = 0; j < size_; ++j) {
          const int64_t n = piece(counts[j], first, region);
          if (n > 0)
            ops::scale_copy(dtype, buffer(rank_) + j * region * es, in + (offsets[j] + first) * es,
                            n, reduction.prescale);
        }
        KOLO_RETURN_IF_ERROR(share(k, d));
        const int64_t n = piece(counts[rank_], first, region);
        if (n > 0) {
          reduce_all(out + first * es, rank_ * region * static_cast<int64_t>(es), n, dtype,
                     reduction.op);
          ops::finish_reduction(dtype, reduction, out + first * es, n, size_);
        }
      }
      return Status::Ok();
    });
  }

  Status do_barrier() override {
    return run("barrier", [&]() -> Status {
      KOLO_RETURN_IF_ERROR(begin_use());
      return share(0, descriptor(Kind::kBarrier, DataType::kUInt8, 0));
    });
  }

 private:
  // Runs one collective, making a failure sticky (see the header).
  template <typename Body>
  Status run(const char* op, Body body) {
    if (!broken_.ok()) return broken_;
    op_ = op;
    Status s = body();
    if (!s.ok()) broken_ = s;
    return s;
  }

  // An allreduce is always one of pieces (a plain one has a single piece), so that both
  // entry points run the same protocol with the same descriptor (the total count): a fused
  // batch on one rank matches a plain allreduce of its total on another.
  Status run_allreduce(std::span<const AllreducePiece> pieces, DataType dtype,
                       const Reduction& reduction) {
    return run("allreduce", [&]() -> Status {
      const int64_t count = pieces_.reset(pieces);
      BufferHeader d = descriptor(Kind::kAllreduce, dtype, count);
      d.op = static_cast<uint32_t>(reduction.op);
      const int64_t es = static_cast<int64_t>(dtype_size(dtype));
      if (count * es <= threshold_) return allreduce_one_round(dtype, reduction, d);
      return allreduce_chunked(dtype, reduction, d);
    });
  }

  // The pieces' inputs (prescaled) go into this rank's buffer; every rank then reduces all P
  // buffers, in rank order, straight into each piece's output.
  Status allreduce_one_round(DataType dtype, const Reduction& reduction, const BufferHeader& d) {
    const int64_t count = pieces_.total();
    const int64_t es = static_cast<int64_t>(dtype_size(dtype));
    KOLO_RETURN_IF_ERROR(begin_use());
    pieces_.for_each(0, count, [&](const AllreducePiece& p, int64_t at, int64_t off, int64_t n) {
      ops::scale_copy(dtype, buffer(rank_) + off * es, static_cast<const char*>(p.input) + at * es,
                      n, reduction.prescale);
    });
    KOLO_RETURN_IF_ERROR(share(0, d));
    pieces_.for_each(0, count, [&](const AllreducePiece& p, int64_t at, int64_t off, int64_t n) {
      char* out = static_cast<char*>(p.output) + at * es;
      reduce_all(out, off * es, n, dtype, reduction.op);
      ops::finish_reduction(dtype, reduction, out, n, size_);
    });
    return Status::Ok();
  }

  // Note [Chunked allreduce]. Per chunk of n elements, each rank owns the share
  // [n * rank / P, n * (rank + 1) / P) and reduces it; every byte it moves is one the
  // algorithm needs (B = the chunk's bytes):
  //   copy in the peers' shares       read B (P-1)/P, write B (P-1)/P into its buffer
  //   reduce its own share            read B (P ranks' B/P each, its own from its input),
  //                                   write B/P into its buffer (for the peers to copy out)
  //   copy its share out              read B/P, write B/P into its output
  //   copy out the peers' results     read B (P-1)/P, write B (P-1)/P into its output
  // In all 5B - B/P per rank for a sum (4.5B at P = 2; an average or a postscale adds B/P read
  // and written in the buffer), against 5B + B/P when every rank also staged its own share and
  // copied it back. The buffers stay in
  // the cache (2 x P x KOLO_SHM_CHUNK), so what reaches memory is the input read once and the
  // output written once. Writing the output with ordinary stores would read every output line
  // first (3B of memory traffic instead of 2B): an allreduce of KOLO_SHM_STREAM_THRESHOLD or
  // more (about half a last-level cache), whose output is gone from the cache by the time the
  // caller reads it, writes it with streaming stores (ops/stream_copy.h). Not an in-place
  // piece's: its output lines are its input's, which this chunk has just read into the cache,
  // so ordinary stores find them there (streaming them measured 5-10% slower). A prescale other
  // than 1 stages the own share too (it must be rounded as the peers' are).
  Status allreduce_chunked(DataType dtype, const Reduction& reduction, const BufferHeader& d) {
    const int64_t count = pieces_.total();
    const int64_t es = static_cast<int64_t>(dtype_size(dtype));
    const int64_t per_use = chunk_ / es;
    const bool own_from_input = reduction.prescale == 1.0;
    const bool stream = count * es >= stream_from_bytes_;
    for (int64_t k = 0, first = 0; first < count; ++k, first += per_use) {
      KOLO_RETURN_IF_ERROR(begin_use());
      const int64_t n = std::min(per_use, count - first);
      const int64_t lo = n * rank_ / size_, hi = n * (rank_ + 1) / size_;
      stage_in(first, 0, own_from_input ? lo : hi, dtype, reduction.prescale);
      stage_in(first, hi, n, dtype, reduction.prescale);
      KOLO_RETURN_IF_ERROR(share(k, d));
      reduce_own_share(first, lo, hi, dtype, reduction, own_from_input);
      publish(mark2());
      // Every share out, from its owner's buffer into the pieces (this rank's own while the
      // peers finish theirs). Only this chunk's elements are written, and their inputs were
      // read above, so in-place pieces are safe.
      for (int i = 0; i < size_; ++i) {
        const int p = (rank_ + i) % size_;
        if (p != rank_) KOLO_RETURN_IF_ERROR(wait_peer(p, mark2()));
        const int64_t plo = n * p / size_, phi = n * (p + 1) / size_;
        const char* src = buffer(p) + plo * es;
        pieces_.for_each(first + plo, phi - plo,
                         [&](const AllreducePiece& piece, int64_t at, int64_t off, int64_t len) {
                           char* out = static_cast<char*>(piece.output) + at * es;
                           const auto bytes = static_cast<size_t>(len * es);
                           if (stream && piece.output != piece.input)
                             ops::stream_copy(out, src + off * es, bytes);
                           else
                             std::memcpy(out, src + off * es, bytes);
                         });
      }
    }
    return Status::Ok();
  }

  // Elements [first + from, first + to) of the concatenation, prescaled, into this rank's
  // buffer at [from, to).
  void stage_in(int64_t first, int64_t from, int64_t to, DataType dtype, double prescale) {
    const int64_t es = static_cast<int64_t>(dtype_size(dtype));
    pieces_.for_each(first + from, to - from,
                     [&](const AllreducePiece& p, int64_t at, int64_t off, int64_t len) {
                       ops::scale_copy(dtype, buffer(rank_) + (from + off) * es,
                                       static_cast<const char*>(p.input) + at * es, len, prescale);
                     });
  }

  // This rank's share [lo, hi) of the chunk at `first`, folded from every rank in rank order (as
  // the one-round path does, so that an element's bits do not depend on the share or chunk it
  // falls in: Note [Deterministic reduction] in ops/deterministic.cc) into its buffer, and
  // finished there. Its own operand is its input where own_from_input, else what stage_in put
  // in its buffer.
  void reduce_own_share(int64_t first, int64_t lo, int64_t hi, DataType dtype,
                        const Reduction& reduction, bool own_from_input) {
    const int64_t es = static_cast<int64_t>(dtype_size(dtype));
    pieces_.for_each(
        first + lo, hi - lo, [&](const AllreducePiece& p, int64_t at, int64_t off, int64_t len) {
          char* out = buffer(rank_) + (lo + off) * es;
          const void* own = own_from_input ? static_cast<const char*>(p.input) + at * es : nullptr;
          reduce_all(out, (lo + off) * es, len, dtype, reduction.op, own);
          ops::finish_reduction(dtype, reduction, out, len, size_);
        });
  }

  // out = the op over every rank's buffer bytes [offset, offset + n elements), a left fold in
  // rank order; `own`, when set, stands for this rank's buffer. `out` may be this rank's operand
  // (an in-place allreduce's input): the partial results then go to acc_, since that operand is
  // still to be read.
  void reduce_all(void* out, int64_t offset, int64_t n, DataType dtype, ReduceOp op,
                  const void* own = nullptr) {
    sources_.resize(static_cast<size_t>(size_));
    for (int p = 0; p < size_; ++p) sources_[p] = buffer(p) + offset;
    if (own != nullptr) sources_[rank_] = own;
    void* acc = out;  // where out is no operand, or rank 0's (the fold's first operand)
    if (out == sources_[rank_] && rank_ != 0 && size_ > 2) {
      acc_.resize(static_cast<size_t>(n) * dtype_size(dtype));
      acc = acc_.data();
    }
    ops::reduce_in_order(dtype, op, out, sources_, acc, n);
  }

  BufferHeader descriptor(Kind kind, DataType dtype, int64_t count) const {
    BufferHeader d{};
    d.kind = static_cast<uint32_t>(kind);
    d.dtype = static_cast<uint32_t>(dtype);
    d.count = count;
    return d;
  }

  // Publishes this rank's part of the current use and waits for every peer's. In a collective's
  // first use (k == 0) it also exchanges and checks the descriptors.
  Status share(int64_t k, const BufferHeader& d) {
    if (k == 0) header(rank_) = d;
    publish(mark1());
    KOLO_RETURN_IF_ERROR(wait_all(mark1()));
    if (k != 0) return Status::Ok();
    for (int p = 0; p < size_; ++p) {
      const BufferHeader theirs = header(p);
      if (theirs.kind != d.kind || theirs.dtype != d.dtype || theirs.op != d.op ||
          theirs.root != d.root || theirs.count != d.count || theirs.counts_hash != d.counts_hash)
        return Status::Mismatch("shm " + std::string(op_) + ": ranks disagree: rank " +
                                std::to_string(rank_) + " runs " + describe(d) + ", rank " +
                                std::to_string(p) + " runs " + describe(theirs));
    }
    return Status::Ok();
  }

  // Starts the next buffer use: waits until every peer is done reading what this rank wrote
  // two uses ago into the same buffer.
  Status begin_use() {
    ++use_;
    return use_ >= 2 ? wait_all(static_cast<uint32_t>(2 * (use_ - 1) + 1)) : Status::Ok();
  }
  uint32_t mark1() const { return static_cast<uint32_t>(2 * use_ + 1); }
  uint32_t mark2() const { return static_cast<uint32_t>(2 * use_ + 2); }
  char* buffer(int rank) const { return seg_->buffer(rank, static_cast<int>(use_ & 1)); }
  BufferHeader& header(int rank) const {
    return seg_->buffer_header(rank, static_cast<int>(use_ & 1));
  }
  // Elements per rank's region when a buffer is split into size() regions.
  int64_t region_elems(size_t es) const {
    return std::max<int64_t>(1, chunk_ / size_ / static_cast<int64_t>(es));
  }

  void publish(uint32_t value) {
    shm::RankLine& line = seg_->line(rank_);
    line.seq.store(value, std::memory_order_seq_cst);
    if (line.waiters.load(std::memory_order_seq_cst) != 0)
      futex(&line.seq, FUTEX_WAKE, INT_MAX, nullptr);
  }

  Status wait_all(uint32_t target) {
    for (int p = 0; p < size_; ++p)
      if (p != rank_) KOLO_RETURN_IF_ERROR(wait_peer(p, target));
    return Status::Ok();
  }

  Status wait_peer(int peer, uint32_t target) {
    shm::RankLine& line = seg_->line(peer);
    // Often the mark is there already (the pipelines wait on marks published a use ago): no
    // clock read then (about 30 ns on the development VM, per wait).
    if (reached(line.seq.load(std::memory_order_acquire), target)) return Status::Ok();
    const auto start = Clock::now();
    do {
      for (int i = 0; i < 8; ++i) {  // a clock read (tens of ns) every few polls
        if (reached(line.seq.load(std::memory_order_acquire), target)) return Status::Ok();
        cpu_relax();
      }
    } while (Clock::now() - start < spin_for_);
    while (Clock::now() - start < kYieldFor) {
      if (reached(line.seq.load(std::memory_order_acquire), target)) return Status::Ok();
      sched_yield();
    }
    for (;;) {
      // Announce the sleep before the last look, so that the publisher either sees a waiter
      // or the futex sees the new value (both are seq_cst).
      line.waiters.fetch_add(1, std::memory_order_seq_cst);
      const uint32_t seen = line.seq.load(std::memory_order_seq_cst);
      if (!reached(seen, target)) {
        const timespec slice{0, kSleepSliceNs};
        futex(&line.seq, FUTEX_WAIT, seen, &slice);
      }
      line.waiters.fetch_sub(1, std::memory_order_seq_cst);
      if (reached(line.seq.load(std::memory_order_acquire), target)) return Status::Ok();
      if (!alive(peer))
        return Status::PeerFailure("shm " + std::string(op_) + ": rank " + std::to_string(peer) +
                                   " (pid " + std::to_string(line.pid) + ") died; rank " +
                                   std::to_string(rank_) + " was waiting for it");
      if (Clock::now() - start >= op_timeout_)
        return Status::Timeout("shm " + std::string(op_) + ": rank " + std::to_string(rank_) +
                               " waited " + std::to_string(op_timeout_.count()) + " ms for rank " +
                               std::to_string(peer) + " (" + op_timeout_knob_ +
                               "), which is alive but did not progress");
    }
  }

  bool alive(int peer) const {
    const int fd = pidfds_[static_cast<size_t>(peer)];
    if (fd >= 0) {
      // A pidfd polls readable once its process has exited (even before it is reaped).
      pollfd p{fd, POLLIN, 0};
      return ::poll(&p, 1, 0) == 0;
    }
    return !(::kill(seg_->line(peer).pid, 0) != 0 && errno == ESRCH);
  }

  template <typename T>
  static T max(const std::vector<T>& v) {
    return v.empty() ? T{} : *std::max_element(v.begin(), v.end());
  }
  static int64_t sum(const std::vector<int64_t>& v) {
    int64_t s = 0;
    for (int64_t x : v) s += x;
    return s;
  }
  static std::vector<int64_t> exclusive_sums(const std::vector<int64_t>& v) {
    std::vector<int64_t> out(v.size(), 0);
    for (size_t i = 1; i < v.size(); ++i) out[i] = out[i - 1] + v[i - 1];
    return out;
  }

  const std::unique_ptr<Segment> seg_;
  const int rank_;
  const int size_;
  const int64_t chunk_;
  const int64_t threshold_;
  const std::chrono::milliseconds op_timeout_;
  const std::string op_timeout_knob_;        // the setting op_timeout_ came from, for the error
  const std::chrono::nanoseconds spin_for_;  // kSpinFor, or less with more ranks than cores
  const int64_t stream_from_bytes_;          // KOLO_SHM_STREAM_THRESHOLD
  std::vector<int> pidfds_;
  shm::PieceIndex pieces_;  // the running allreduce's pieces
  // reduce_all's scratch, kept across calls so that steady state allocates nothing.
  std::vector<const void*> sources_;
  std::vector<char> acc_;
  int64_t use_ = -1;  // buffer uses so far, minus one (the same on every rank)
  const char* op_ = "";
  Status broken_;
};

}  // namespace

Result<std::unique_ptr<Backend>> make_shm_backend(const BackendContext& context) {
  if (context.knobs == nullptr)
    return Status::InvalidArgument(
        "shm: context.knobs is not set (the KnobSet that kolo::init() parsed)");
  shm::SegmentParams params;
  params.chunk_bytes = context.knobs->size(shm_knobs::kChunk);
  params.threshold_bytes = context.knobs->size(shm_knobs::kThreshold);
  // alltoall's first use holds every rank's send counts in one buffer.
  if (params.chunk_bytes < sizeof(int64_t) * static_cast<uint64_t>(std::max(context.size, 1)))
    return Status::InvalidArgument("shm: KOLO_SHM_CHUNK must be at least 8 bytes per rank (" +
                                   std::to_string(8 * context.size) + "), got " +
                                   std::to_string(params.chunk_bytes));
  KOLO_ASSIGN_OR_RETURN(std::unique_ptr<shm::Segment> segment,
                        shm::connect_segment(context, params));
  return std::unique_ptr<Backend>(std::make_unique<ShmBackend>(
      std::move(segment), context.rank, context.op_timeout, context.op_timeout_knob,
      static_cast<int64_t>(context.knobs->size(shm_knobs::kStreamThreshold))));
}

BackendEntry backend_entry_shm() {
  BackendEntry entry;
  entry.name = "shm";
  entry.factory = &make_shm_backend;
  entry.devices = {DeviceKind::kCpu};
  entry.one_host = true;
  entry.rank_order = true;  // both allreduce paths fold the ranks in rank order
  return entry;
}

}  // namespace kolo
