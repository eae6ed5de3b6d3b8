#include "backends/shm/piece_index.h"

#include <gtest/gtest.h>

#include <vector>

namespace kolo::shm {
namespace {

// One part of a range as for_each reports it: which piece, where in it, where in the range.
struct Part {
  size_t piece;
  int64_t at, off, len;
  bool operator==(const Part&) const = default;
};

std::vector<Part> parts(const PieceIndex& index, const std::vector<AllreducePiece>& pieces,
                        int64_t begin, int64_t n) {
  std::vector<Part> out;
  index.for_each(begin, n, [&](const AllreducePiece& p, int64_t at, int64_t off, int64_t len) {
    out.push_back({static_cast<size_t>(&p - pieces.data()), at, off, len});
  });
  return out;
}

// Pieces of 0, 3, 0, 0, 1, 4 and 0 elements: the concatenation is [0, 8).
std::vector<AllreducePiece> with_empty_ones() {
  static float x[8];
  std::vector<AllreducePiece> pieces;
  for (int64_t n : {0, 3, 0, 0, 1, 4, 0}) pieces.push_back({x, x, n});
  return pieces;
}

TEST(PieceIndex, TheWholeRangeVisitsEveryNonEmptyPieceOnceInOrder) {
  const auto pieces = with_empty_ones();
  PieceIndex index;
  EXPECT_EQ(index.reset(pieces), 8);
  EXPECT_EQ(parts(index, pieces, 0, 8),
            (std::vector<Part>{{1, 0, 0, 3}, {4, 0, 3, 1}, {5, 0, 4, 4}}));
}

TEST(PieceIndex, ARangeThatStartsAndEndsInsidePiecesIsCutAtTheirBorders) {
  const auto pieces = with_empty_ones();
  PieceIndex index;
  index.reset(pieces);
  // [2, 6): the last element of piece 1, all of piece 4, the first two of piece 5.
  EXPECT_EQ(parts(index, pieces, 2, 4),
            (std::vector<Part>{{1, 2, 0, 1}, {4, 0, 1, 1}, {5, 0, 2, 2}}));
  // [3, 4) starts where empty pieces 2 and 3 and piece 4 all start: only piece 4 has it.
  EXPECT_EQ(parts(index, pieces, 3, 1), (std::vector<Part>{{4, 0, 0, 1}}));
  EXPECT_EQ(parts(index, pieces, 7, 1), (std::vector<Part>{{5, 3, 0, 1}}));
  EXPECT_TRUE(parts(index, pieces, 5, 0).empty());
}

TEST(PieceIndex, NoPiecesOrOnlyEmptyOnesHaveNothingToVisit) {
  PieceIndex index;
  EXPECT_EQ(index.reset({}), 0);
  EXPECT_TRUE(parts(index, {}, 0, 0).empty());
  float x = 0;
  const std::vector<AllreducePiece> empty{{&x, &x, 0}, {&x, &x, 0}};
  EXPECT_EQ(index.reset(empty), 0);
  EXPECT_TRUE(parts(index, empty, 0, 0).empty());
}

TEST(PieceIndex, AResetForgetsTheLastBatch) {
  const auto pieces = with_empty_ones();
  PieceIndex index;
  index.reset(pieces);
  float y[2];
  const std::vector<AllreducePiece> other{{y, y, 2}};
  EXPECT_EQ(index.reset(other), 2);
  EXPECT_EQ(index.total(), 2);
  EXPECT_EQ(parts(index, other, 1, 1), (std::vector<Part>{{0, 1, 0, 1}}));
}

}  // namespace
}  // namespace kolo::shm
