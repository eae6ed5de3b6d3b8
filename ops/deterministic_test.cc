// The rank-order algorithms (Note [Deterministic reduction]) over thread channels: every
// element equals, bit for bit, the left fold of the ranks' inputs in rank order, computed here
// one element at a time, for P = 1..6, every dtype and op, both algorithms, segment sizes that
// cut blocks anywhere, and offsets: an element's bits do not depend on where in a buffer it is.
#include "ops/deterministic.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "ops/collectives.h"
#include "ops/reduce.h"
#include "ops/test_util.h"

namespace kolo::ops {
namespace {

using testing::put;
using testing::run_ranks;

constexpr DataType kAllTypes[] = {DataType::kUInt8,    DataType::kInt8,    DataType::kInt16,
                                  DataType::kInt32,    DataType::kInt64,   DataType::kFloat16,
                                  DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64};
constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax,
                                ReduceOp::kProduct};

// Rank r's input: mixed magnitudes, so that the order of additions shows in the rounding.
std::vector<char> input(DataType t, ReduceOp op, int r, int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed * 31 + static_cast<uint64_t>(r));
  std::uniform_real_distribution<double> unit(-1.0, 1.0);
  std::vector<char> out(static_cast<size_t>(n) * dtype_size(t));
  for (int64_t i = 0; i < n; ++i) {
    double v = op == ReduceOp::kProduct ? 1.0 + 0.25 * unit(rng)
                                        : unit(rng) * std::ldexp(1.0, static_cast<int>(rng() % 17));
    if (testing::is_integer(t)) v = std::floor(v);
    put(t, out.data(), i, v);
  }
  return out;
}

// The fold of element i alone, one kernel call per step on a one-element buffer: no algorithm,
// no blocks, no segments.
std::vector<char> reference(DataType t, const Reduction& red,
                            const std::vector<std::vector<char>>& in, int64_t n) {
  const size_t es = dtype_size(t);
  const int p = static_cast<int>(in.size());
  std::vector<char> out(static_cast<size_t>(n) * es);
  char acc[8], x[8];
  for (int64_t i = 0; i < n; ++i) {
    scale_copy(t, acc, in[0].data() + i * es, 1, red.prescale);
    for (int q = 1; q < p; ++q) {
      scale_copy(t, x, in[q].data() + i * es, 1, red.prescale);
      reduce_into(t, red.op, acc, x, 1);
    }
    finish_reduction(t, red, acc, 1, p);
    std::memcpy(out.data() + i * es, acc, es);
  }
  return out;
}

TEST(DeterministicAllreduce, EqualsTheRankOrderFoldForEveryTypeOpAndAlgorithm) {
  for (int p = 1; p <= 6; ++p) {
    for (DataType t : kAllTypes) {
      for (ReduceOp op : kAllOps) {
        // Integers keep scale 1: a scaled value past the type's range has no defined
        // conversion back (UBSan), and the fold's order is what this test is about.
        const bool integer = testing::is_integer(t);
        const Reduction red{op, integer ? 1.0 : 0.5,
                            op == ReduceOp::kAverage && !integer ? 3.0 : 1.0};
        for (int64_t n : {int64_t{1}, int64_t{p + 1}, int64_t{1000}}) {
          std::vector<std::vector<char>> in;
          for (int r = 0; r < p; ++r) in.push_back(input(t, op, r, n, 1));
          const std::vector<char> want = reference(t, red, in, n);
          // Recursive-doubling's size (all-to-all), and the ring with segments of 3 and 64 bytes.
          for (AllreduceTuning tuning :
               {AllreduceTuning{1 << 20, 64, true}, AllreduceTuning{0, 3, true},
                AllreduceTuning{0, 64, true}}) {
            std::vector<std::vector<char>> out = in;
            auto st = run_ranks(p, [&](Channel& c) {
              Workspace ws;
              return allreduce(c, out[c.rank()].data(), n, t, red, ws, tuning);
            });
            for (int r = 0; r < p; ++r) {
              ASSERT_TRUE(st[r].ok()) << st[r].to_string();
              ASSERT_EQ(out[r], want)
                  << "P " << p << " " << dtype_name(t) << " " << reduce_op_name(op) << " n " << n
                  << " rank " << r << " small " << tuning.small_message_bytes;
            }
          }
        }
      }
    }
  }
}

// An element's result does not depend on its offset: a buffer reduced whole equals its two
// halves reduced apart (the ring, without the knob, fails this for three ranks or more).
TEST(DeterministicAllreduce, AnElementsBitsDoNotDependOnItsOffset) {
  const int p = 3;
  const int64_t n = 999, cut = 500;
  std::vector<std::vector<char>> whole, head, tail;
  for (int r = 0; r < p; ++r) {
    whole.push_back(input(DataType::kFloat32, ReduceOp::kSum, r, n, 2));
    head.emplace_back(whole[r].begin(), whole[r].begin() + cut * 4);
    tail.emplace_back(whole[r].begin() + cut * 4, whole[r].end());
  }
  auto reduce = [&](std::vector<std::vector<char>>& bufs, bool rank_order) {
    const int64_t count = static_cast<int64_t>(bufs[0].size() / 4);
    auto st = run_ranks(p, [&](Channel& c) {
      Workspace ws;
      return allreduce(c, bufs[c.rank()].data(), count, DataType::kFloat32, Reduction{}, ws,
                       AllreduceTuning{0, 256, rank_order});
    });
    for (auto& s : st) ASSERT_TRUE(s.ok()) << s.to_string();
  };
  for (bool rank_order : {true, false}) {
    auto w = whole, h = head, t = tail;
    reduce(w, rank_order);
    reduce(h, rank_order);
    reduce(t, rank_order);
    std::vector<char> joined = h[0];
    joined.insert(joined.end(), t[0].begin(), t[0].end());
    if (rank_order)
      EXPECT_EQ(joined, w[0]);
    else
      EXPECT_NE(joined, w[0]) << "the control: the ring's order follows the offset";
  }
}

TEST(DeterministicReducescatter, EqualsTheRankOrderFold) {
  for (int p = 1; p <= 5; ++p) {
    for (DataType t : {DataType::kFloat32, DataType::kBFloat16, DataType::kInt32}) {
      std::vector<int64_t> counts;
      for (int r = 0; r < p; ++r) counts.push_back(r == 1 ? 0 : 100 + 37 * r);
      int64_t total = 0;
      for (int64_t c : counts) total += c;
      const Reduction red{ReduceOp::kAverage, 1.0, 1.0};
      std::vector<std::vector<char>> in;
      for (int r = 0; r < p; ++r) in.push_back(input(t, red.op, r, total, 3));
      const std::vector<char> want = reference(t, red, in, total);
      const size_t es = dtype_size(t);
      std::vector<std::vector<char>> out(static_cast<size_t>(p));
      auto st = run_ranks(p, [&](Channel& c) {
        Workspace ws;
        out[c.rank()].resize(static_cast<size_t>(counts[c.rank()]) * es);
        return reducescatter(c, in[c.rank()].data(), out[c.rank()].data(), counts, t, red, ws,
                             /*rank_order=*/true);
      });
      int64_t offset = 0;
      for (int r = 0; r < p; ++r) {
        ASSERT_TRUE(st[r].ok()) << st[r].to_string();
        const std::vector<char> block(want.begin() + offset * es,
                                      want.begin() + (offset + counts[r]) * es);
        EXPECT_EQ(out[r], block) << "P " << p << " " << dtype_name(t) << " rank " << r;
        offset += counts[r];
      }
    }
  }
}

}  // namespace
}  // namespace kolo::ops
