// Runtime tests with in-process ranks (see test_cluster.h).
#include "coordinator/runtime.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <set>
#include <thread>

#include "backends/local_backend.h"
#include "coordinator/test_cluster.h"

namespace kolo::coord {
namespace {

using namespace std::chrono_literals;
using testkit::allreduce;
using testkit::Cluster;
using testkit::submit;
using testkit::test_config;

class RuntimeSizes : public ::testing::TestWithParam<int> {};

TEST_P(RuntimeSizes, AllreduceEveryReduceOp) {
  const int P = GetParam();
  Cluster c(P);
  c.each([&](int r) {
    std::vector<float> sum(5, r + 1.0f), avg(5, r + 1.0f), mn(5, r + 1.0f), mx(5, r + 1.0f),
        prod(5, r + 1.0f), scaled(5, r + 1.0f);
    std::vector<Handle> hs = {
        allreduce(c[r], "sum", sum),
        allreduce(c[r], "avg", avg, {.reduction = {.op = ReduceOp::kAverage}}),
        allreduce(c[r], "min", mn, {.reduction = {.op = ReduceOp::kMin}}),
        allreduce(c[r], "max", mx, {.reduction = {.op = ReduceOp::kMax}}),
        allreduce(c[r], "prod", prod, {.reduction = {.op = ReduceOp::kProduct}}),
        allreduce(c[r], "scaled", scaled, {.reduction = {ReduceOp::kSum, 2.0, 0.25}})};
    for (auto& h : hs) ASSERT_TRUE(h.wait().ok()) << h.wait().to_string();
    float total = P * (P + 1) / 2.0f, product = 1;
    for (int i = 1; i <= P; ++i) product *= i;
    EXPECT_EQ(sum[4], total);
    EXPECT_FLOAT_EQ(avg[0], total / P);
    EXPECT_EQ(mn[2], 1.0f);
    EXPECT_EQ(mx[2], static_cast<float>(P));
    EXPECT_EQ(prod[1], product);
    EXPECT_FLOAT_EQ(scaled[3], total * 2.0f * 0.25f);
  });
}

TEST_P(RuntimeSizes, AllgatherBroadcastAlltoallReducescatterBarrier) {
  const int P = GetParam();
  Cluster c(P);
  c.each([&](int r) {
    // allgather: rank r contributes r+1 rows of 2 values r.
    std::vector<int32_t> in(2 * (r + 1), r);
    auto g = submit(c[r], build_allgather("gather", view_of(in.data(), {r + 1, 2}), {}));
    // broadcast from the last rank.
    std::vector<double> b(3, r);
    auto bc = submit(c[r], build_broadcast("bcast", view_of(b.data(), {3}), {P - 1}, P));
    // alltoall: send j+1 rows to rank j, each row = 100*r + j.
    std::vector<int64_t> splits(P), a2a_in;
    for (int j = 0; j < P; ++j) {
      splits[j] = j + 1;
      for (int k = 0; k <= j; ++k) a2a_in.push_back(100 * r + j);
    }
    auto a2a = submit(c[r], build_alltoall("a2a", view_of(a2a_in.data(), {(int64_t)a2a_in.size()}),
                                           {splits, {}}, P));
    // reducescatter of 2P+1 rows of value r+1.
    std::vector<float> rs_in(2 * P + 1, r + 1.0f);
    auto rs = submit(c[r], build_reducescatter("rs", view_of(rs_in.data(), {2 * P + 1}), {}, P));
    auto bar = submit(c[r], build_barrier("bar"));

    ASSERT_TRUE(g.wait().ok()) << g.wait().to_string();
    HostTensor out = g.take_output();
    int64_t rows = P * (P + 1) / 2;
    EXPECT_EQ(out.shape, (std::vector<int64_t>{rows, 2}));
    int64_t row = 0;
    for (int q = 0; q < P; ++q)
      for (int k = 0; k <= q; ++k, ++row) EXPECT_EQ(out.data_as<int32_t>()[2 * row + 1], q);

    ASSERT_TRUE(bc.wait().ok()) << bc.wait().to_string();
    EXPECT_EQ(b[2], P - 1.0);

    ASSERT_TRUE(a2a.wait().ok()) << a2a.wait().to_string();
    EXPECT_EQ(a2a.received_splits(), std::vector<int64_t>(P, r + 1));
    HostTensor got = a2a.take_output();
    ASSERT_EQ(got.num_elements(), P * (r + 1));
    for (int q = 0; q < P; ++q) EXPECT_EQ(got.data_as<int64_t>()[q * (r + 1)], 100 * q + r);

    ASSERT_TRUE(rs.wait().ok()) << rs.wait().to_string();
    HostTensor mine = rs.take_output();
    EXPECT_EQ(mine.shape[0], 2 + (r < 1 ? 1 : 0));
    EXPECT_EQ(mine.data_as<float>()[0], P * (P + 1) / 2.0f);
    EXPECT_TRUE(bar.wait().ok());
  });
}

INSTANTIATE_TEST_SUITE_P(P, RuntimeSizes, ::testing::Values(1, 2, 3, 4));

TEST(RuntimeTest, DifferentOrdersSeveralThreadsAndFusion) {
  const int P = 3, N = 60;
  RuntimeConfig config = test_config();
  config.fusion_threshold = 64;  // a few tensors per fused batch
  Cluster c(P, config);
  c.each([&](int r) {
    std::vector<std::vector<float>> data(N);
    std::vector<int> order(N);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), std::mt19937(r));
    std::vector<Handle> hs(N);
    // Two submitting threads per rank, each taking every other name of this rank's order.
    auto work = [&](int part) {
      for (int k = part; k < N; k += 2) {
        int i = order[k];
        data[i].assign(1 + i % 7, static_cast<float>(i + r));
        hs[i] = allreduce(c[r], "t" + std::to_string(i), data[i]);
      }
    };
    std::thread t0(work, 0), t1(work, 1);
    t0.join();
    t1.join();
    for (int i = 0; i < N; ++i) {
      ASSERT_TRUE(hs[i].wait().ok()) << hs[i].wait().to_string();
      EXPECT_EQ(data[i].back(), static_cast<float>(P * i + P * (P - 1) / 2)) << i;
    }
  });
}

// Cached allreduces give the same exact results whether their data rides in the
// negotiation (Note [Piggy-back]), partly (a 16-byte budget fits some, not others), or
// never (0: the bit-vector allreduce and the data backend).
class PiggybackBudget : public ::testing::TestWithParam<int> {};

TEST_P(PiggybackBudget, CachedAllreducesGiveExactResults) {
  const int P = 3;
  RuntimeConfig config = test_config();
  config.piggyback_bytes = static_cast<uint64_t>(GetParam());
  Cluster c(P, config);
  // Rank 0's timeline shows which path ran.
  const std::string trace =
      ::testing::TempDir() + "piggyback_" + std::to_string(GetParam()) + ".json";
  ASSERT_TRUE(c[0].timeline().start(trace, 0, false).ok());
  c.each([&](int r) {
    for (int step = 0; step < 4; ++step) {  // step 0 negotiates, later steps hit the cache
      std::vector<int32_t> i32(3, r + step);
      std::vector<double> f64(2, r + 1.0);
      std::vector<float> avg(4, r + 1.0f), mx(1, r * 1.5f), big(600, r + 1.0f);
      std::vector<int64_t> scalar(1, 7 * r);
      std::vector<Handle> hs = {
          allreduce(c[r], "big", big),  // 2400 bytes: never fits
          submit(c[r],
                 build_allreduce("i32", view_of(i32.data(), {3}), view_of(i32.data(), {3}), {})),
          submit(c[r], build_allreduce("f64", view_of(f64.data(), {2}), view_of(f64.data(), {2}),
                                       {.reduction = {.op = ReduceOp::kProduct}})),
          allreduce(c[r], "avg", avg, {.reduction = {ReduceOp::kAverage, 2.0, 0.5}}),
          allreduce(c[r], "max", mx, {.reduction = {.op = ReduceOp::kMax}}),
          submit(c[r],
                 build_allreduce("scalar", view_of(scalar.data(), {}), view_of(scalar.data(), {}),
                                 {.reduction = {.op = ReduceOp::kMin}}))};
      for (auto& h : hs) ASSERT_TRUE(h.wait().ok()) << h.name() << ": " << h.wait().to_string();
      EXPECT_EQ(i32, std::vector<int32_t>(3, 3 + 3 * step));
      EXPECT_EQ(f64, std::vector<double>(2, 6.0));
      EXPECT_EQ(avg, std::vector<float>(4, 2.0f));  // (1+2+3)*2/3*0.5
      EXPECT_EQ(mx[0], 3.0f);
      EXPECT_EQ(big[599], 6.0f);
      EXPECT_EQ(scalar[0], 0);
    }
  });
  c[0].timeline().stop();
  std::ifstream in(trace);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text.find("PIGGYBACK_REDUCE") != std::string::npos, GetParam() > 0) << trace;
  std::remove(trace.c_str());
}

INSTANTIATE_TEST_SUITE_P(Bytes, PiggybackBudget, ::testing::Values(0, 16, 1024));

TEST(RuntimeTest, TenThousandSmallTensorsInOneStepTwice) {
  const int P = 2, N = 10000;
  Cluster c(P);
  c.each([&](int r) {
    std::vector<int32_t> v(N);
    for (int step = 0; step < 2; ++step) {  // the second step runs from the response cache
      std::vector<Handle> hs;
      hs.reserve(N);
      for (int i = 0; i < N; ++i) {
        v[i] = i;
        hs.push_back(submit(c[r], build_allreduce("s" + std::to_string(i), view_of(&v[i], {}),
                                                  view_of(&v[i], {}), {})));
      }
      for (auto& h : hs) ASSERT_TRUE(h.wait().ok());
      for (int i = 0; i < N; ++i) ASSERT_EQ(v[i], 2 * i);
    }
  });
}

TEST(RuntimeTest, GroupedAllreduceRunsAsOne) {
  Cluster c(2);
  c.each([&](int r) {
    std::vector<float> a(3, r + 1.0f), b(1000, r + 2.0f);
    auto h = submit(c[r], build_grouped_allreduce(
                              "group", {view_of(a.data(), {3}), view_of(b.data(), {10, 100})},
                              {.reduction = {.op = ReduceOp::kAverage}}));
    ASSERT_TRUE(h.wait().ok()) << h.wait().to_string();
    EXPECT_EQ(a[0], 1.5f);
    EXPECT_EQ(b[999], 2.5f);
  });
}

TEST(RuntimeTest, MismatchFailsEveryRankNamingTensorRanksAndValues) {
  Cluster c(2);
  c.each([&](int r) {
    std::vector<float> v(r == 0 ? 4 : 6, 1.0f);
    auto h = allreduce(c[r], "bad", v);
    Status st = h.wait();
    EXPECT_EQ(st.code(), StatusCode::kMismatch);
    EXPECT_EQ(st.message(),
              "allreduce 'bad': shape differs across ranks: rank 0 has [4]; rank 1 has [6]");
    // The runtime keeps working after a mismatch.
    std::vector<float> ok(2, 1.0f);
    EXPECT_TRUE(allreduce(c[r], "ok", ok).wait().ok());
    EXPECT_EQ(ok[0], 2.0f);
  });
}

TEST(RuntimeTest, DuplicateInFlightNameIsRejectedOnThatRank) {
  Cluster c(2);
  std::vector<float> a(1, 1.0f), b(1, 1.0f), other(1, 1.0f);
  auto first = allreduce(c[0], "dup", a);
  auto second = allreduce(c[0], "dup", b);
  Status st = second.wait();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("allreduce 'dup': an operation with this name is already in flight"),
            std::string::npos)
      << st.to_string();
  auto peer = allreduce(c[1], "dup", other);
  EXPECT_TRUE(first.wait().ok());
  EXPECT_TRUE(peer.wait().ok());
  EXPECT_EQ(a[0], 2.0f);
}

// Every check of the builders, with its message naming the operation, tensor and argument.
// dtype, reduction, root and splits are checked by the validate_* functions that backends use.
TEST(RuntimeTest, BadArgumentsAreRejectedAtSubmission) {
  std::vector<float> v(4);
  std::vector<double> d(4);
  const TensorView ok = view_of(v.data(), {4});
  TensorView bad_dtype = ok;
  bad_dtype.dtype = static_cast<DataType>(42);
  TensorView null_data = ok;
  null_data.data = nullptr;
  const Reduction bad_op{static_cast<ReduceOp>(9)};
  auto message = [](const Result<std::unique_ptr<Entry>>& r) {
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().to_string();
    return r.status().message();
  };
  EXPECT_EQ(message(build_allreduce("", ok, ok, {})), "operation name must not be empty");
  EXPECT_EQ(message(build_allreduce("x", view_of(v.data(), {-4}), view_of(v.data(), {-4}), {})),
            "allreduce 'x': input dimension 0 must be >= 0, got -4 in shape [-4]");
  EXPECT_EQ(message(build_allreduce("x", bad_dtype, ok, {})),
            "allreduce 'x': input: dtype must be one of uint8, int8, int32, int64, float16, "
            "bfloat16, float32, float64, int16, got enum value 42");
  EXPECT_EQ(message(build_allreduce("x", null_data, null_data, {})),
            "allreduce 'x': input data is null but shape [4] has 4 elements");
  EXPECT_EQ(message(build_allreduce("x", ok, view_of(d.data(), {4}), {})),
            "allreduce 'x': output must match input: expected [4] float32 on cpu, got [4] "
            "float64 on cpu");
  EXPECT_EQ(message(build_allreduce("x", ok, ok, {.reduction = bad_op})),
            "allreduce 'x': reduce op must be one of sum, average, min, max, product, got enum "
            "value 9");
  EXPECT_EQ(message(build_allreduce("x", ok, ok, {.reduction = {.prescale = HUGE_VAL}})),
            "allreduce 'x': prescale must be finite, got inf");
  EXPECT_EQ(message(build_allreduce("x", ok, ok, {.reduction = {.postscale = std::nan("")}})),
            "allreduce 'x': postscale must be finite, got nan");
  EXPECT_EQ(message(build_grouped_allreduce("g", {}, {})),
            "allreduce 'g': a grouped allreduce needs >= 1 tensor, got 0");
  EXPECT_EQ(message(build_grouped_allreduce("g", {ok, view_of(d.data(), {4})}, {})),
            "allreduce 'g[1]': every tensor of a group must have dtype float32 on cpu, got "
            "float64 on cpu");
  EXPECT_EQ(message(build_allgather("a", view_of(v.data(), {}), {})),
            "allgather 'a': input must have at least 1 dimension, got a scalar");
  EXPECT_EQ(message(build_broadcast("y", ok, {5}, 2)),
            "broadcast 'y': root must be in [0, 2), got 5");
  EXPECT_EQ(message(build_alltoall("z", ok, {{1, 2}, {}}, 2)),
            "alltoall 'z': splits must sum to shape[0] = 4, got 3");
  EXPECT_EQ(message(build_alltoall("z", ok, {{1, 2, 1}, {}}, 2)),
            "alltoall 'z': splits must have one entry per rank (2), got 3");
  EXPECT_EQ(message(build_alltoall("z", ok, {{5, -1}, {}}, 2)),
            "alltoall 'z': splits[1] must be >= 0, got -1");
  EXPECT_EQ(message(build_alltoall("z", ok, {}, 3)),
            "alltoall 'z': without splits, shape[0] must divide by 3 ranks, got 4");
  EXPECT_EQ(message(build_reducescatter("r", ok, {.reduction = bad_op}, 2)),
            "reducescatter 'r': reduce op must be one of sum, average, min, max, product, got "
            "enum value 9");
  EXPECT_EQ(message(build_reducescatter("r", ok, {.reduction = {.prescale = -HUGE_VAL}}, 2)),
            "reducescatter 'r': prescale must be finite, got -inf");
  EXPECT_EQ(message(build_reducescatter("r", ok, {.recv_counts = {4, -1, 1}}, 3)),
            "reducescatter 'r': recv_counts[1] must be >= 0, got -1");
  EXPECT_EQ(message(build_reducescatter("r", ok, {.recv_counts = {4}}, 2)),
            "reducescatter 'r': recv_counts must have one entry per rank (2), got 1");
  EXPECT_EQ(message(build_reducescatter("r", ok, {.recv_counts = {1, 2}}, 2)),
            "reducescatter 'r': recv_counts [1, 2] must sum to shape[0] = 4, got 3");
  EXPECT_EQ(message(build_barrier("")), "operation name must not be empty");
}

TEST(RuntimeTest, ShutdownFailsPendingOperationsOnEveryRank) {
  auto c = std::make_unique<Cluster>(2);
  std::vector<float> v(1, 1.0f), w(1, 1.0f);
  auto pending = allreduce((*c)[1], "never", v);  // rank 0 never submits it
  (void)(*c)[0].shutdown();
  Status st = pending.wait();
  EXPECT_EQ(st.code(), StatusCode::kAborted);
  EXPECT_NE(st.message().find("rank 0 called shutdown()"), std::string::npos) << st.to_string();
  auto later = allreduce((*c)[1], "later", w);
  EXPECT_EQ(later.wait().code(), StatusCode::kAborted);
}

TEST(RuntimeTest, DeadRankFailsPendingAndLaterHandlesWithinTheTimeout) {
  // Rank 1 never starts: rank 0's control-plane collective times out.
  Cluster c(2, test_config(), 300ms, /*start_ranks=*/1);
  std::vector<float> v(1, 1.0f), w(1, 1.0f);
  auto h = allreduce(c[0], "orphan", v);
  Status st = h.wait(10s);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("negotiation"), std::string::npos) << st.to_string();
  auto later = allreduce(c[0], "later", w);
  EXPECT_EQ(later.wait(1s).message(), st.message());
}

// A failure in autotune's link measurement (before the first cycle) goes through the failure
// board like any other, so that every rank names the job's first failure: it used to skip
// name_first_failure and report only what this rank saw.
TEST(RuntimeTest, AFailedLinkMeasurementIsNamedThroughTheFailureBoard) {
  RuntimeConfig config = test_config();
  config.autotune.enabled = true;
  config.autotune.samples = 1;
  config.name_first_failure = [](const Status& st) {
    return Status(st.code(), "named by the board: " + st.message());
  };
  Cluster c(2, config, 300ms, /*start_ranks=*/1);  // rank 1 never measures
  std::vector<float> v(1, 1.0f);
  Status st = allreduce(c[0], "after", v).wait(10s);
  EXPECT_EQ(st.message().rfind("named by the board: ", 0), 0u) << st.to_string();
  EXPECT_NE(st.message().find("autotune (link measurement)"), std::string::npos) << st.to_string();
}

// A peer's announced list sizes come off the wire: one that is negative or absurd is refused
// with an error naming the rank, where it used to reach std::string's constructor (or resize),
// throw length_error past the loop's catch and end the process through std::terminate. The
// peer here is a hand-driven control plane speaking the cycle's first collectives (Note
// [Cycle]); the other rank is a real Runtime.
TEST(RuntimeTest, AnAbsurdListSizeFromAPeerFailsNamingItNotTheProcess) {
  RuntimeConfig config = test_config();
  config.piggyback_bytes = 0;  // step 1 as an allreduce of the cache bits
  const std::vector<int64_t> lengths = {-1, int64_t{1} << 62};
  for (int real : {0, 1}) {
    for (int64_t bad : lengths) {
      SCOPED_TRACE("real rank " + std::to_string(real) + ", announced " + std::to_string(bad));
      const int fake = 1 - real;
      auto data = ops::make_thread_channels(2, 5s);
      auto ctrl = ops::make_thread_channels(2, 5s);
      auto rt = Runtime::create(config, Topology{real, 2},
                                std::make_unique<ChannelBackend>("data", std::move(data[real])),
                                std::make_unique<ChannelBackend>("ctrl", std::move(ctrl[real])));
      ASSERT_TRUE(rt.ok()) << rt.status().to_string();
      std::vector<float> v(1, 1.0f);
      Handle h = allreduce(**rt, "t", v);
      ChannelBackend peer("ctrl", std::move(ctrl[fake]));
      std::vector<uint8_t> bits(1 + config.cache_capacity, 0);  // 0: the slow path
      ASSERT_TRUE(peer.allreduce(bits.data(), bits.data(), static_cast<int64_t>(bits.size()),
                                 DataType::kUInt8, Reduction{ReduceOp::kMin})
                      .ok());
      std::vector<int64_t> sizes(2);
      int64_t mine = real == 0 ? bad : 0;  // as rank 1, the request list; as rank 0, empty
      ASSERT_TRUE(peer.allgather(&mine, sizes.data(), DataType::kInt64, {1, 1}).ok());
      std::string expected = "rank 1 announced a request list of " + std::to_string(bad);
      if (real == 1) {  // as rank 0: take rank 1's requests, then announce the response's size
        std::string requests(static_cast<size_t>(sizes[1]), '\0');
        const char none = 0;
        ASSERT_TRUE(peer.allgather(&none, requests.data(), DataType::kUInt8, sizes).ok());
        ASSERT_TRUE(peer.broadcast(&bad, 1, DataType::kInt64, 0).ok());
        expected = "rank 0 announced a response list of " + std::to_string(bad);
      }
      Status st = h.wait(10s);
      EXPECT_EQ(st.code(), StatusCode::kIoError) << st.to_string();
      EXPECT_NE(st.message().find(expected), std::string::npos) << st.to_string();
    }
  }
}

TEST(RuntimeTest, JoinedRankContributesIdentity) {
  Cluster c(3);
  c.each([&](int r) {
    if (r == 2) {
      auto j = submit(c[r], build_join());
      std::vector<float> v(1);
      auto rejected = allreduce(c[r], "after-join", v);
      EXPECT_EQ(rejected.wait().code(), StatusCode::kInvalidArgument);
      EXPECT_TRUE(j.wait().ok()) << j.wait().to_string();
      return;
    }
    std::vector<float> sum(2, r + 1.0f), avg(2, r + 1.0f), mn(2, r + 1.0f);
    EXPECT_TRUE(allreduce(c[r], "j.sum", sum).wait().ok());
    EXPECT_TRUE(
        allreduce(c[r], "j.avg", avg, {.reduction = {.op = ReduceOp::kAverage}}).wait().ok());
    EXPECT_TRUE(allreduce(c[r], "j.min", mn, {.reduction = {.op = ReduceOp::kMin}}).wait().ok());
    EXPECT_EQ(sum[0], 3.0f);
    EXPECT_EQ(avg[0], 1.0f);  // (1 + 2 + 0) / 3: every rank counts, the joined one as 0
    EXPECT_EQ(mn[1], 1.0f);
    EXPECT_TRUE(submit(c[r], build_join()).wait().ok());
  });
}

// Issue 15: a user tensor named like join()'s operation ("join") on one rank while another has
// joined used to be matched to the join entry by name and crash the joined rank. Kolo's own
// operations now have reserved names, and a response is matched by name and type.
TEST(RuntimeTest, AUserTensorNamedJoinIsNotTheJoin) {
  Cluster c(2);
  c.each([&](int r) {
    if (r == 1) {
      EXPECT_TRUE(submit(c[r], build_join()).wait().ok());
      return;
    }
    std::vector<float> v(3, 2.0f);
    auto h = allreduce(c[r], "join", v);
    EXPECT_TRUE(h.wait().ok()) << h.wait().to_string();
    EXPECT_EQ(v, std::vector<float>(3, 2.0f));  // rank 1 contributed 0
    std::vector<float> w(1);
    TensorView wv = view_of(w.data(), {1});
    EXPECT_EQ(build_allreduce("kolo:join", wv, wv, {}).status().message(),
              "operation name 'kolo:join': names starting with 'kolo:' are reserved for Kolo's "
              "own operations");
    EXPECT_TRUE(submit(c[r], build_join()).wait().ok());
  });
}

// Issue 15, then issue 34 (Horovod's join): with a rank joined, kAverage divides by all 4
// ranks (the joined one contributed 0) and then applies the postscale, exactly: 27 / 4
// truncates to 6, * 13 = 78 (27 * (13 / 4.0) would truncate to 87). Both the direct path (one
// tensor) and the fusion buffer (a group) divide on this rank.
TEST(RuntimeTest, JoinedAverageDividesBeforeThePostscale) {
  Cluster c(4);
  c.each([&](int r) {
    if (r == 3) {
      EXPECT_TRUE(submit(c[r], build_join()).wait().ok());
      return;
    }
    const AllreduceOptions avg{.reduction = {.op = ReduceOp::kAverage, .postscale = 13.0}};
    std::vector<int32_t> one(3, 9), a(2, 9), b(5, 9);
    // One after the other, so that the single tensor is not fused with the group.
    auto single = submit(
        c[r], build_allreduce("one", view_of(one.data(), {3}), view_of(one.data(), {3}), avg));
    EXPECT_TRUE(single.wait().ok()) << single.wait().to_string();
    auto group = submit(c[r], build_grouped_allreduce(
                                  "group", {view_of(a.data(), {2}), view_of(b.data(), {5})}, avg));
    EXPECT_TRUE(group.wait().ok()) << group.wait().to_string();
    EXPECT_EQ(one, std::vector<int32_t>(3, 78));
    EXPECT_EQ(a, std::vector<int32_t>(2, 78));
    EXPECT_EQ(b, std::vector<int32_t>(5, 78));
    EXPECT_TRUE(submit(c[r], build_join()).wait().ok());
  });
}

// kolo::start_timeline's file rule (KOLO_TIMELINE's): "{rank}" becomes the rank, else each
// rank of several writes "<stem>.rank<r>.json"; a second start while recording fails.
TEST(RuntimeTest, StartTimelineWritesOneFilePerRank) {
  Cluster c(2);
  const std::string dir = ::testing::TempDir();
  for (const std::string& path : {dir + "tl_rule.json", dir + "tl_rule_{rank}.json"}) {
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(c[r].start_timeline(path, false).ok());
      EXPECT_EQ(c[r].start_timeline(path, false).code(), StatusCode::kPreconditionFailed);
    }
    c.each([&](int r) {
      std::vector<float> v(1, 1.0f);
      EXPECT_TRUE(allreduce(c[r], "traced", v).wait().ok());
    });
    for (int r = 0; r < 2; ++r) c[r].timeline().stop();
  }
  for (const std::string& file : {dir + "tl_rule.rank0.json", dir + "tl_rule.rank1.json",
                                  dir + "tl_rule_0.json", dir + "tl_rule_1.json"}) {
    std::ifstream in(file);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(text.find("\"traced\""), std::string::npos) << file << ": " << text;
    std::remove(file.c_str());
  }
  std::ifstream shared(dir + "tl_rule.json");
  EXPECT_FALSE(shared.good()) << "no rank may write the path itself in a job of 2";
}

// Issue 33: a fused batch's operations say so, each with its own bytes and shape (or member
// count: a grouped allreduce, such as a gradient bucket, has no one shape) beside the batch's
// operation count and bytes; each span ends before its handle completes, whose completion is a
// CALLBACK span on the Runtime's callbacks row, naming the operation.
TEST(ExecutorTimeline, AFusedBatchsSpansCarryItsCountAndBytesAndEndBeforeTheCallbacks) {
  const std::string path = ::testing::TempDir() + "fused_" + std::to_string(::getpid()) + ".json";
  std::unique_ptr<Backend> local = make_local_backend("local");
  Timeline timeline;
  ASSERT_TRUE(timeline.start(path, 0).ok());
  Executor executor(*local, timeline, "set 2: ");
  std::vector<float> a(3, 1.0f), b(5, 2.0f), c(2, 3.0f);
  auto one = build_allreduce("a", view_of(a.data(), {3}), view_of(a.data(), {3}), {});
  auto group = build_grouped_allreduce("g", {view_of(b.data(), {5}), view_of(c.data(), {2})}, {});
  ASSERT_TRUE(one.ok() && group.ok());
  std::vector<Response> responses(2);
  for (auto* e : {one->get(), group->get()}) {
    e->trace_kind = "ALLREDUCE";
    e->trace = timeline.begin_op("set 2: " + e->request.name, e->trace_kind);
  }
  responses[0].name = "a";
  responses[0].shapes = {{3}};
  responses[1].name = "g";
  responses[1].shapes = {{5}, {2}};
  bool called = false;
  Handle(one->get()->state).then([&](const Status&) { called = true; });
  ASSERT_TRUE(executor.run({{&responses[0], one->get()}, {&responses[1], group->get()}}).ok());
  EXPECT_TRUE(Handle(one->get()->state).wait().ok());
  EXPECT_TRUE(called);
  EXPECT_EQ(b, std::vector<float>(5, 2.0f));  // one rank: the sum is the input
  timeline.stop();
  std::ifstream in(path);
  const nlohmann::json events = nlohmann::json::parse(in);
  std::remove(path.c_str());
  std::map<int, std::string> rows;
  std::map<std::string, nlohmann::json> ops, callbacks;  // by row, by tensor
  for (const auto& e : events) {
    if (e.at("ph") == "M" && e.at("name") == "thread_name")
      rows[e.at("tid")] = e.at("args").at("name");
    if (e.at("ph") != "X") continue;
    if (e.at("name") == "ALLREDUCE") ops[rows.at(e.at("tid"))] = e;
    if (e.at("name") == "CALLBACK") {
      EXPECT_EQ(rows.at(e.at("tid")), "set 2: kolo:callbacks");
      callbacks[e.at("args").at("tensor")] = e;
    }
  }
  ASSERT_EQ(ops.size(), 2u) << events.dump();
  EXPECT_EQ(ops["set 2: a"].at("args"), (nlohmann::json{{"bytes", 12},
                                                        {"dtype", "float32"},
                                                        {"shape", "[3]"},
                                                        {"backend", "local"},
                                                        {"fused", 2},
                                                        {"fused_bytes", 40},
                                                        {"status", "OK"}}));
  EXPECT_EQ(ops["set 2: g"].at("args"), (nlohmann::json{{"bytes", 28},
                                                        {"dtype", "float32"},
                                                        {"members", 2},
                                                        {"backend", "local"},
                                                        {"fused", 2},
                                                        {"fused_bytes", 40},
                                                        {"status", "OK"}}));
  ASSERT_EQ(callbacks.size(), 2u) << events.dump();
  for (const std::string tensor : {"set 2: a", "set 2: g"}) {
    const nlohmann::json& op = ops[tensor];
    const nlohmann::json& cb = callbacks[tensor];
    EXPECT_EQ(cb.at("args").at("op"), "ALLREDUCE");
    EXPECT_GE(cb.at("ts").get<double>(), op.at("ts").get<double>() + op.at("dur").get<double>());
  }
}

// A process set's Runtime records on the global set's timeline, on its own rows, and leaves
// the timeline to its owner: its shutdown (the set's removal) does not stop it, and it cannot
// start it.
TEST(RuntimeTest, ASetsRuntimeRecordsOnTheGlobalTimelineWithoutOwningIt) {
  auto global = Runtime::create(test_config(), Topology{}, make_local_backend("local"),
                                make_local_backend("control"));
  ASSERT_TRUE(global.ok()) << global.status().to_string();
  auto set =
      Runtime::create(test_config(), Topology{}, make_local_backend("local"),
                      make_local_backend("control"), nullptr, (*global)->timeline_rows("set 1: "));
  ASSERT_TRUE(set.ok()) << set.status().to_string();
  const std::string path =
      ::testing::TempDir() + "set_rows_" + std::to_string(::getpid()) + ".json";
  ASSERT_TRUE((*global)->start_timeline(path, /*mark_cycles=*/true).ok());
  const Status start = (*set)->start_timeline(path, false);
  EXPECT_EQ(start.code(), StatusCode::kPreconditionFailed);
  EXPECT_NE(start.message().find("records on the global set's timeline"), std::string::npos)
      << start.to_string();
  std::vector<float> v(2, 1.0f);
  EXPECT_TRUE(allreduce(**set, "x", v).wait().ok());
  EXPECT_TRUE((*set)->shutdown().ok());
  EXPECT_TRUE((*global)->timeline().active());
  EXPECT_TRUE(allreduce(**global, "x", v).wait().ok());
  (*global)->timeline().stop();
  std::ifstream in(path);
  const nlohmann::json events = nlohmann::json::parse(in);
  std::remove(path.c_str());
  std::map<int, std::string> rows;
  std::multiset<std::string> ops;  // by row
  for (const auto& e : events) {
    if (e.at("ph") == "M" && e.at("name") == "thread_name")
      rows[e.at("tid")] = e.at("args").at("name");
    if (e.at("ph") == "X" && e.at("name") == "ALLREDUCE") ops.insert(rows.at(e.at("tid")));
  }
  EXPECT_EQ(ops, (std::multiset<std::string>{"set 1: x", "x"}));
  EXPECT_EQ(std::count_if(rows.begin(), rows.end(),
                          [](const auto& r) { return r.second == "set 1: kolo:callbacks"; }),
            1);
}

TEST(RuntimeTest, StallInspectorNamesTheMissingRank) {
  RuntimeConfig config = test_config();
  config.stall_check_time = 100ms;
  config.heartbeat = 10ms;
  Cluster c(2, config);
  std::vector<float> v(1, 1.0f), w(1, 1.0f);
  auto h = allreduce(c[0], "late", v);
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (c[0].stall_warnings().empty() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(10ms);
  auto warnings = c[0].stall_warnings();
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("allreduce 'late' was submitted by ranks [0]"), std::string::npos)
      << warnings[0];
  EXPECT_NE(warnings[0].find("still waiting for ranks [1]"), std::string::npos) << warnings[0];
  auto h1 = allreduce(c[1], "late", w);
  EXPECT_TRUE(h.wait().ok());
  EXPECT_TRUE(h1.wait().ok());
  EXPECT_EQ(v[0], 2.0f);
}

TEST(RuntimeTest, StallShutdownTimeFailsTheJobWithTheMessage) {
  RuntimeConfig config = test_config();
  config.stall_check_time = 50ms;
  config.stall_shutdown_time = 150ms;
  config.heartbeat = 10ms;
  Cluster c(2, config);
  std::vector<float> v(1, 1.0f);
  auto h = allreduce(c[0], "stuck", v);
  Status st = h.wait(10s);
  EXPECT_EQ(st.code(), StatusCode::kPeerFailure);
  EXPECT_NE(st.message().find("KOLO_STALL_SHUTDOWN_TIME"), std::string::npos) << st.to_string();
  EXPECT_NE(st.message().find("'stuck'"), std::string::npos) << st.to_string();
}

TEST(RuntimeTest, CallbacksRunOnceWithTheStatus) {
  Cluster c(1);
  std::vector<float> v(3, 2.0f);
  auto h = allreduce(c[0], "cb", v);
  std::atomic<int> calls{0};
  h.then([&](const Status& s) { calls += s.ok() ? 1 : 100; });
  ASSERT_TRUE(h.wait().ok());
  h.then([&](const Status& s) { calls += s.ok() ? 1 : 100; });  // already done: runs at once
  EXPECT_EQ(calls.load(), 2);
  EXPECT_TRUE(h.poll());
  EXPECT_TRUE(h.status().ok());
}

}  // namespace
}  // namespace kolo::coord
