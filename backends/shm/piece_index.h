// PieceIndex: where a range of a fused allreduce's concatenation lies in its pieces
// (Note [Allreduce pieces] in backends/backend.h). The shm backend moves chunk-sized ranges of
// the concatenation in and out of its staging buffers; this maps each range onto the pieces'
// own memory, so that no fusion buffer is needed.
//
// Not thread-safe. Borrows the pieces until the next reset(); keeps its index's memory, so
// that it allocates nothing once it has seen the largest batch.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "backends/backend.h"

namespace kolo::shm {

class PieceIndex {
 public:
  // Indexes `pieces` (counts >= 0, as Backend validated). Returns the total count.
  int64_t reset(std::span<const AllreducePiece> pieces) {
    pieces_ = pieces;
    starts_.resize(pieces.size());
    int64_t total = 0;
    for (size_t i = 0; i < pieces.size(); ++i) {
      starts_[i] = total;
      total += pieces[i].count;
    }
    total_ = total;
    return total;
  }

  // Calls fn(piece, at, off, len) for each part of elements [begin, begin + n) of the
  // concatenation, in order: elements [at, at + len) of `piece` are elements
  // [begin + off, begin + off + len) of the concatenation. Pieces of 0 elements are skipped.
  // Requires 0 <= begin and begin + n <= the total.
  template <typename Fn>
  void for_each(int64_t begin, int64_t n, Fn&& fn) const {
    if (n <= 0) return;
    // The last piece that starts at or before `begin`: among empty pieces that share a start
    // with a non-empty one, that is the non-empty one (it comes last), so a part is found.
    const auto after = std::upper_bound(starts_.begin(), starts_.end(), begin);
    size_t i = static_cast<size_t>(after - starts_.begin()) - 1;
    for (int64_t pos = begin, end = begin + n; pos < end; ++i) {
      const int64_t len = std::min(end, starts_[i] + pieces_[i].count) - pos;
      if (len > 0) fn(pieces_[i], pos - starts_[i], pos - begin, len);
      pos += len;
    }
  }

  int64_t total() const { return total_; }

 private:
  std::span<const AllreducePiece> pieces_;
  std::vector<int64_t> starts_;  // starts_[i]: piece i's first element in the concatenation
  int64_t total_ = 0;
};

}  // namespace kolo::shm
