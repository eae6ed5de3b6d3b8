// The collectives over thread channels for P = 1..8 and element counts 0, 1, P-1, P+1 and
// large, checked against closed-form results. Values are small integers so that every float
// format represents every partial result exactly, which makes results independent of the
// reduction order.
#include "ops/collectives.h"

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <string>

#include "ops/test_util.h"

namespace kolo::ops {
namespace {

using testing::get;
using testing::is_integer;
using testing::put;
using testing::run_ranks;

constexpr DataType kAllTypes[] = {DataType::kUInt8,    DataType::kInt8,    DataType::kInt16,
                                  DataType::kInt32,    DataType::kInt64,   DataType::kFloat16,
                                  DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64};
constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax,
                                ReduceOp::kProduct};

std::vector<int64_t> counts_for(int p) {
  std::vector<int64_t> c = {0, 1, p - 1, p + 1};
  return c;
}

// Rank r's input element i. Products use 1 and 2 only (at most 2^8 = 256: exact in bfloat16).
double input_value(ReduceOp op, int r, int64_t i) {
  if (op == ReduceOp::kProduct) return static_cast<double>((r + i) % 2 + 1);
  return static_cast<double>((r * 3 + i) % 5 + 1);
}

// Expected result element i of a reduction over p ranks, computed the way the contract says:
// prescale each input, combine, divide by p for average, postscale.
double expected_value(DataType t, const Reduction& spec, int p, int64_t i) {
  char one[8];
  auto as_type = [&](double v) {
    put(t, one, 0, v);
    return get(t, one, 0);
  };
  double acc = 0;
  for (int r = 0; r < p; ++r) {
    const double v = as_type(input_value(spec.op, r, i) * spec.prescale);
    if (r == 0) {
      acc = v;
      continue;
    }
    switch (spec.op) {
      case ReduceOp::kSum:
      case ReduceOp::kAverage:
        acc += v;
        break;
      case ReduceOp::kMin:
        acc = std::min(acc, v);
        break;
      case ReduceOp::kMax:
        acc = std::max(acc, v);
        break;
      case ReduceOp::kProduct:
        acc = as_type(acc * v);
        break;
    }
  }
  acc = as_type(acc);
  if (spec.op == ReduceOp::kAverage) {
    if (is_integer(t) || t == DataType::kFloat64)
      acc = as_type(acc / p);
    else
      acc = as_type(static_cast<float>(acc) / static_cast<float>(p));
  }
  return as_type(acc * spec.postscale);
}

enum class Algo { kChooser, kRing, kRecursiveDoubling };

void check_allreduce(int p, int64_t count, DataType t, const Reduction& spec, Algo algo) {
  const size_t es = dtype_size(t);
  std::vector<std::vector<char>> bufs(p, std::vector<char>(count * es + 1));
  for (int r = 0; r < p; ++r)
    for (int64_t i = 0; i < count; ++i) put(t, bufs[r].data(), i, input_value(spec.op, r, i));
  auto st = run_ranks(p, [&](Channel& ch) {
    Workspace ws;
    void* d = bufs[ch.rank()].data();
    switch (algo) {
      case Algo::kChooser:
        return allreduce(ch, d, count, t, spec, ws, {64, 24});
      case Algo::kRing:
        return allreduce_ring(ch, d, count, t, spec, ws, 16);
      case Algo::kRecursiveDoubling:
        return allreduce_recursive_doubling(ch, d, count, t, spec, ws);
    }
    return Status::Internal("unreachable");
  });
  for (int r = 0; r < p; ++r) {
    ASSERT_TRUE(st[r].ok()) << st[r].to_string();
    for (int64_t i = 0; i < count; ++i)
      ASSERT_EQ(get(t, bufs[r].data(), i), expected_value(t, spec, p, i))
          << "P " << p << " count " << count << " dtype " << dtype_name(t) << " op "
          << reduce_op_name(spec.op) << " algo " << static_cast<int>(algo) << " rank " << r << " i "
          << i;
  }
}

TEST(AllreduceTest, EverySizeTypeOpAndAlgorithm) {
  for (int p = 1; p <= 8; ++p)
    for (int64_t count : counts_for(p))
      for (DataType t : kAllTypes)
        for (ReduceOp op : kAllOps)
          for (Algo a : {Algo::kRing, Algo::kRecursiveDoubling})
            check_allreduce(p, count, t, {op, 1.0, 1.0}, a);
}

TEST(AllreduceTest, ChooserAndScalingOnLongerBuffers) {
  // 37 elements cross the chooser's 64-byte threshold for 4- and 8-byte types; the ring runs
  // with 24-byte segments, so blocks span several segments.
  for (int p : {2, 3, 5, 8})
    for (DataType t : kAllTypes)
      for (ReduceOp op : kAllOps) {
        check_allreduce(p, 37, t, {op, 1.0, 1.0}, Algo::kChooser);
        if (op != ReduceOp::kProduct) check_allreduce(p, 37, t, {op, 2.0, 0.5}, Algo::kChooser);
      }
}

TEST(AllreduceTest, LargeRing) {
  for (int p : {3, 8}) {
    check_allreduce(p, 100003, DataType::kFloat32, {ReduceOp::kSum}, Algo::kRing);
    check_allreduce(p, 100003, DataType::kBFloat16, {ReduceOp::kMax}, Algo::kChooser);
  }
  check_allreduce(5, 100003, DataType::kInt64, {ReduceOp::kAverage}, Algo::kRecursiveDoubling);
}

std::vector<int64_t> split_counts(int p, int64_t seed) {
  std::vector<int64_t> c(p);
  for (int j = 0; j < p; ++j) c[j] = (j + seed) % 3;  // includes zeros
  return c;
}

TEST(ReducescatterTest, PerRankCounts) {
  for (int p = 1; p <= 8; ++p)
    for (int64_t seed : {0, 1, 2})
      for (DataType t : {DataType::kInt32, DataType::kFloat16, DataType::kFloat32})
        for (ReduceOp op : kAllOps) {
          const Reduction spec{op, 1.0, 1.0};
          const auto counts = split_counts(p, seed);
          int64_t total = 0;
          for (auto c : counts) total += c;
          const size_t es = dtype_size(t);
          std::vector<std::vector<char>> in(p, std::vector<char>(total * es + 1));
          std::vector<std::vector<char>> out(p, std::vector<char>(3 * es + 1));
          for (int r = 0; r < p; ++r)
            for (int64_t i = 0; i < total; ++i) put(t, in[r].data(), i, input_value(op, r, i));
          auto st = run_ranks(p, [&](Channel& ch) {
            Workspace ws;
            return reducescatter(ch, in[ch.rank()].data(), out[ch.rank()].data(), counts, t, spec,
                                 ws);
          });
          int64_t off = 0;
          for (int r = 0; r < p; ++r) {
            ASSERT_TRUE(st[r].ok()) << st[r].to_string();
            for (int64_t i = 0; i < counts[r]; ++i)
              ASSERT_EQ(get(t, out[r].data(), i), expected_value(t, spec, p, off + i))
                  << "P " << p << " rank " << r << " i " << i;
            off += counts[r];
          }
        }
}

void check_allgatherv(int p, const std::vector<int64_t>& counts, DataType t, bool in_place) {
  const size_t es = dtype_size(t);
  int64_t total = 0;
  for (auto c : counts) total += c;
  std::vector<std::vector<char>> in(p), out(p, std::vector<char>(total * es + 1));
  auto value = [](int r, int64_t i) { return static_cast<double>((r * 7 + i) % 100); };
  int64_t off = 0;
  for (int r = 0; r < p; ++r) {
    in[r].resize(counts[r] * es + 1);
    for (int64_t i = 0; i < counts[r]; ++i) {
      put(t, in[r].data(), i, value(r, i));
      if (in_place) put(t, out[r].data(), off + i, value(r, i));
    }
    off += counts[r];
  }
  auto st = run_ranks(p, [&](Channel& ch) {
    const int r = ch.rank();
    int64_t my_off = 0;
    for (int j = 0; j < r; ++j) my_off += counts[j];
    const void* src = in_place ? out[r].data() + my_off * es : in[r].data();
    return allgatherv(ch, src, out[r].data(), counts, t);
  });
  for (int r = 0; r < p; ++r) {
    ASSERT_TRUE(st[r].ok()) << st[r].to_string();
    int64_t o = 0;
    for (int j = 0; j < p; ++j)
      for (int64_t i = 0; i < counts[j]; ++i, ++o)
        ASSERT_EQ(get(t, out[r].data(), o), value(j, i)) << "P " << p << " rank " << r;
  }
}

TEST(AllgathervTest, PerRankCountsIncludingZeros) {
  for (int p = 1; p <= 8; ++p)
    for (int64_t seed : {0, 1, 2})
      for (DataType t : {DataType::kUInt8, DataType::kBFloat16, DataType::kFloat64}) {
        check_allgatherv(p, split_counts(p, seed), t, false);
        check_allgatherv(p, split_counts(p, seed), t, true);
      }
  check_allgatherv(3, {100003, 0, 70001}, DataType::kFloat32, false);
}

void check_broadcast(int p, int64_t count, DataType t, int root) {
  const size_t es = dtype_size(t);
  std::vector<std::vector<char>> bufs(p, std::vector<char>(count * es + 1, 0));
  for (int64_t i = 0; i < count; ++i) put(t, bufs[root].data(), i, static_cast<double>(i % 97));
  auto st = run_ranks(
      p, [&](Channel& ch) { return broadcast(ch, bufs[ch.rank()].data(), count, t, root); });
  for (int r = 0; r < p; ++r) {
    ASSERT_TRUE(st[r].ok()) << st[r].to_string();
    for (int64_t i = 0; i < count; ++i)
      ASSERT_EQ(get(t, bufs[r].data(), i), static_cast<double>(i % 97))
          << "P " << p << " root " << root << " rank " << r;
  }
}

TEST(BroadcastTest, EveryRootTreeAndChain) {
  for (int p = 1; p <= 8; ++p)
    for (int root = 0; root < p; ++root) {
      for (int64_t count : counts_for(p)) check_broadcast(p, count, DataType::kInt32, root);
    }
  for (int p : {2, 5, 8}) check_broadcast(p, 100003, DataType::kFloat32, p - 1);  // chain
}

TEST(AlltoallvTest, PerPairCounts) {
  for (int p = 1; p <= 8; ++p)
    for (int64_t seed : {0, 1}) {
      auto sc = [&](int from, int to) { return static_cast<int64_t>((from + 2 * to + seed) % 4); };
      auto value = [](int from, int to, int64_t i) {
        return static_cast<double>(from * 16 + to + i);
      };
      const DataType t = DataType::kInt64;
      std::vector<std::vector<int64_t>> in(p), out(p);
      std::vector<std::vector<int64_t>> send(p, std::vector<int64_t>(p)), recv = send;
      for (int r = 0; r < p; ++r) {
        for (int j = 0; j < p; ++j) {
          send[r][j] = sc(r, j);
          recv[r][j] = sc(j, r);
          for (int64_t i = 0; i < send[r][j]; ++i)
            in[r].push_back(static_cast<int64_t>(value(r, j, i)));
        }
        out[r].assign(in[r].size() + 16, -1);
      }
      auto st = run_ranks(p, [&](Channel& ch) {
        const int r = ch.rank();
        return alltoallv(ch, in[r].data(), send[r], out[r].data(), recv[r], t);
      });
      for (int r = 0; r < p; ++r) {
        ASSERT_TRUE(st[r].ok()) << st[r].to_string();
        int64_t o = 0;
        for (int j = 0; j < p; ++j)
          for (int64_t i = 0; i < recv[r][j]; ++i, ++o)
            ASSERT_EQ(out[r][o], static_cast<int64_t>(value(j, r, i))) << "P " << p;
      }
    }
}

TEST(AlltoallvTest, CountMismatchIsReportedNamingBothRanks) {
  std::vector<int64_t> in0 = {1, 2, 3, 4}, in1 = {9, 9};
  std::vector<int64_t> out0(8), out1(8);
  auto st = run_ranks(2, [&](Channel& ch) {
    Status s;
    if (ch.rank() == 0)
      s = alltoallv(ch, in0.data(), {1, 3}, out0.data(), {1, 2}, DataType::kInt64);
    else
      s = alltoallv(ch, in1.data(), {2, 0}, out1.data(), {2, 0}, DataType::kInt64);
    // The stream stays in step: a barrier afterwards still works.
    Status b = barrier(ch);
    return s.ok() ? b : s;
  });
  EXPECT_TRUE(st[0].ok()) << st[0].to_string();
  ASSERT_EQ(st[1].code(), StatusCode::kMismatch) << st[1].to_string();
  EXPECT_NE(st[1].message().find("rank 0 sends 3 elements to rank 1"), std::string::npos)
      << st[1].message();
  EXPECT_NE(st[1].message().find("recv_counts[0] = 2"), std::string::npos) << st[1].message();
}

TEST(BarrierTest, NobodyLeavesEarly) {
  for (int p = 1; p <= 8; ++p) {
    std::atomic<int> entered{0};
    std::atomic<bool> early{false};
    auto st = run_ranks(p, [&](Channel& ch) {
      for (int round = 0; round < 3; ++round) {
        entered.fetch_add(1);
        KOLO_RETURN_IF_ERROR(barrier(ch));
        if (entered.load() < p * (round + 1)) early = true;
        KOLO_RETURN_IF_ERROR(barrier(ch));  // keeps the next round's increments out
      }
      return Status::Ok();
    });
    for (auto& s : st) ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_FALSE(early.load()) << "P " << p;
  }
}

// ---- errors ---------------------------------------------------------------------------------

// The algorithms trust their documented preconditions (Backend validates the arguments once,
// see backends/channel_backend_test.cc); a violated one is a bug, caught by KOLO_ENFORCE
// before any byte is sent.
TEST(CollectiveErrorsTest, ViolatedPreconditionsThrowInternalAndSendNothing) {
  auto channels = make_thread_channels(2, std::chrono::seconds(5));
  Channel& ch = *channels[0];
  Workspace ws;
  float x[4] = {1, 2, 3, 4};
  const DataType f32 = DataType::kFloat32;
  auto internal_error = [](const std::function<Status()>& call) -> std::string {
    try {
      Status s = call();
      return "returned " + s.to_string();
    } catch (const Error& e) {
      EXPECT_EQ(e.status().code(), StatusCode::kInternal) << e.status().to_string();
      return e.status().message();
    }
  };
  struct Case {
    std::function<Status()> call;
    std::string want;
  };
  const Case cases[] = {
      {[&] {
         return allreduce(ch, nullptr, 3, f32, {}, ws, {64, 24});
       },
       "check failed: count >= 0"},
      {[&] {
         return allreduce(ch, x, -3, f32, {}, ws, {64, 24});
       },
       "count -3"},
      {[&] {
         return allreduce(ch, x, 4, f32, {}, ws, {64, 0});
       },
       "check failed: tuning.segment_bytes > 0"},
      {[&] { return allreduce_ring(ch, x, 4, f32, {}, ws, 0); }, "check failed: segment_bytes > 0"},
      {[&] { return reducescatter(ch, x, x, {1}, f32, {}, ws); }, "counts.size() 1"},
      {[&] {
         return allgatherv(ch, nullptr, x, {1, 1}, f32);
       },
       "check failed: (input != nullptr"},
      {[&] { return broadcast(ch, x, 4, f32, 2); }, "root 2, size 2"},
      {[&] {
         return alltoallv(ch, x, {1, 1}, x, {2, 1}, f32);
       },
       "send_counts[0] 1, recv_counts[0] 2"},
      {[&] {
         return alltoallv(ch, x, {1, 1, 1}, x, {1, 1}, f32);
       },
       "send_counts.size() 3, recv_counts.size() 2"},
  };
  for (const Case& c : cases) {
    const std::string message = internal_error(c.call);
    EXPECT_NE(message.find(c.want), std::string::npos) << message;
  }
  // Nothing was sent: rank 1 has no bytes waiting from rank 0.
  char probe;
  Request r = channels[1]->irecv(0, &probe, 1);
  EXPECT_FALSE(r.done());
  channels[0]->send(1, "z", 1).ok();
  EXPECT_TRUE(channels[1]->wait(r).ok());
  EXPECT_EQ(probe, 'z');
}

TEST(CollectiveErrorsTest, ClosedPeerFailsEveryAlgorithmInsteadOfHanging) {
  for (int algo = 0; algo < 5; ++algo) {
    auto st = run_ranks(4, [&](Channel& ch) -> Status {
      if (ch.rank() == 2) {
        static_cast<ThreadChannel&>(ch).close();  // rank 2 "dies" before the collective
        return Status::Ok();
      }
      Workspace ws;
      std::vector<float> d(1000, 1.0f), out(4000);
      switch (algo) {
        case 0:
          return allreduce_ring(ch, d.data(), 1000, DataType::kFloat32, {}, ws, 256);
        case 1:
          return allreduce_recursive_doubling(ch, d.data(), 1000, DataType::kFloat32, {}, ws);
        case 2:
          return allgatherv(ch, d.data(), out.data(), {1000, 1000, 1000, 1000}, DataType::kFloat32);
        case 3:
          return broadcast(ch, d.data(), 1000, DataType::kFloat32, 2);
        default:
          return barrier(ch);
      }
    });
    int failures = 0;
    for (int r : {0, 1, 3}) {
      if (!st[r].ok()) {
        ++failures;
        EXPECT_EQ(st[r].code(), StatusCode::kPeerFailure) << st[r].to_string();
        EXPECT_NE(st[r].message().find("rank"), std::string::npos);
      }
    }
    EXPECT_GE(failures, 1) << "algo " << algo;
  }
}

TEST(CollectiveErrorsTest, SilentPeerTimesOut) {
  auto st = run_ranks(
      2,
      [&](Channel& ch) -> Status {
        if (ch.rank() == 1) return Status::Ok();  // never takes part
        float x = 1;
        Workspace ws;
        return allreduce(ch, &x, 1, DataType::kFloat32, {}, ws, {64, 24});
      },
      std::chrono::milliseconds(100));
  ASSERT_EQ(st[0].code(), StatusCode::kTimeout) << st[0].to_string();
  EXPECT_NE(st[0].message().find("rank 1"), std::string::npos) << st[0].message();
}

}  // namespace
}  // namespace kolo::ops
