// The shared-memory segment of the shm backend and how the ranks of one host come to share it.
//
// Layout (all offsets multiples of 64 bytes, so that no two ranks' words share a cache line):
//   SegmentHeader                       written by rank 0 before any peer maps the segment
//   RankLine[size]                      one per rank: its progress counter, futex waiters, pid
//   per rank r, per parity b in {0, 1}: BufferHeader + chunk_bytes of data ("rank r's buffer b")
// Rank r writes only its own RankLine's seq and its own buffers; every rank reads everyone's.
// Indices and sizes are never taken from shared memory: each rank computes the layout itself
// from the header's size and chunk_bytes, checked against the mapping's length once, at connect.
//
// Creation (connect_segment): rank 0 makes an anonymous memfd (no name in /dev/shm or any file
// system), maps it and fills the header and every rank's pid, then hands the file descriptor to
// each peer with SCM_RIGHTS over an abstract AF_UNIX socket whose name is published in the store
// under "<store_prefix>/shm/name". A peer gets the descriptor only after the mutual
// challenge/response over the job secret (common/auth.h); rank 0 learns each peer's pid
// from SO_PEERCRED, not from anything the peer says. Every rank closes the descriptor once it
// has mapped the segment, so the memory goes away when the last rank exits, however it exits
// (SIGKILL included): nothing is left to clean up. Processes of the same user can still reach
// the memory through /proc/<pid>/fd or /proc/<pid>/map_files while the job runs; that is the
// threat model of auth.h (accidents and casual misuse, not a determined local attacker).
//
// Errors: InvalidArgument for a bad context; Timeout when the peers do not all connect within
// connect_timeout; PeerFailure when a peer fails authentication; IoError for a failed syscall.
// Thread-safety: connect_segment may run concurrently for different ranks (threads in tests).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "backends/registry.h"
#include "kolo/status.h"

namespace kolo::shm {

inline constexpr uint64_t kSegmentMagic = 0x6b6f6c6f73686d31;  // "kolo" "shm1"
inline constexpr size_t kLine = 64;

struct alignas(kLine) SegmentHeader {
  uint64_t magic;
  int32_t size;
  int32_t reserved;
  uint64_t chunk_bytes;      // data bytes of each buffer
  uint64_t threshold_bytes;  // allreduces up to this size take the one-round path
  uint64_t total_bytes;
};

struct alignas(kLine) RankLine {
  std::atomic<uint32_t> seq;      // the rank's progress (see shm_backend.cc); a futex word
  std::atomic<uint32_t> waiters;  // ranks sleeping on seq: the owner wakes them when > 0
  int32_t pid;                    // written by rank 0 before the segment is shared
};

// What the first buffer use of a collective says about it, so that peers can check that every
// rank runs the same collective with the same sizes.
struct alignas(kLine) BufferHeader {
  uint32_t kind;
  uint32_t dtype;
  uint32_t op;
  int32_t root;
  int64_t count;
  uint64_t counts_hash;
  uint32_t verdict;  // alltoall: 1 when this rank's received counts match what peers send
};

static_assert(sizeof(SegmentHeader) == kLine && sizeof(RankLine) == kLine &&
              sizeof(BufferHeader) == kLine);
static_assert(std::atomic<uint32_t>::is_always_lock_free);

// The parameters rank 0 chooses (from its knobs) and every rank then reads from the header.
// No defaults here: the knob rows hold them (shm_knobs.h), and the factory fills both.
struct SegmentParams {
  uint64_t chunk_bytes = 0;      // KOLO_SHM_CHUNK
  uint64_t threshold_bytes = 0;  // KOLO_SHM_THRESHOLD
};

// A mapped segment. Unmapped by the destructor; the memory itself is freed by the kernel when
// the last rank's mapping is gone.
class Segment {
 public:
  Segment(void* base, size_t bytes) : base_(static_cast<char*>(base)), bytes_(bytes) {}
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;
  ~Segment();

  const SegmentHeader& header() const { return *reinterpret_cast<SegmentHeader*>(base_); }
  int size() const { return header().size; }
  uint64_t chunk_bytes() const { return header().chunk_bytes; }
  RankLine& line(int rank) const { return reinterpret_cast<RankLine*>(base_ + kLine)[rank]; }
  BufferHeader& buffer_header(int rank, int parity) const {
    return *reinterpret_cast<BufferHeader*>(base_ + buffer_offset(rank, parity));
  }
  char* buffer(int rank, int parity) const { return base_ + buffer_offset(rank, parity) + kLine; }

  // The bytes a segment of `size` ranks with buffers of `chunk_bytes` takes.
  static uint64_t bytes_for(int size, uint64_t chunk_bytes);

 private:
  size_t buffer_offset(int rank, int parity) const {
    return kLine * (1 + static_cast<size_t>(size())) +
           (2 * static_cast<size_t>(rank) + static_cast<size_t>(parity)) *
               (kLine + static_cast<size_t>(chunk_bytes()));
  }

  char* const base_;
  const size_t bytes_;
};

// This rank's mapping of the job's segment, created by rank 0 with `params` and shared as the
// file comment says. All ranks of context call it together.
Result<std::unique_ptr<Segment>> connect_segment(const BackendContext& context,
                                                 const SegmentParams& params);

}  // namespace kolo::shm
