// Issue 17 with in-process ranks (test_cluster.h): reducescatter with caller-given receive
// counts, and join()'s last-joined rank. The API-level operations built on top of these
// (grouped gathers, objects) run in real processes: tests/coordinator.
#include <gtest/gtest.h>

#include <numeric>
#include <thread>

#include "coordinator/test_cluster.h"

namespace kolo::coord {
namespace {

using namespace std::chrono_literals;
using testkit::Cluster;
using testkit::submit;

class ApiOpsSizes : public ::testing::TestWithParam<int> {};

// Rank q receives q rows (rank 0 none): rows of value (r + 1) * (row + 1), summed over ranks.
TEST_P(ApiOpsSizes, ReducescatterWithRecvCounts) {
  const int P = GetParam();
  Cluster c(P);
  c.each([&](int r) {
    std::vector<int64_t> counts(P);
    std::iota(counts.begin(), counts.end(), 0);
    const int64_t rows = P * (P - 1) / 2;
    std::vector<double> in;
    for (int64_t i = 0; i < rows; ++i) in.insert(in.end(), 3, (r + 1.0) * (i + 1));
    auto h = submit(c[r], build_reducescatter("rs.counts", view_of(in.data(), {rows, 3}),
                                              {.recv_counts = counts}, P));
    ASSERT_TRUE(h.wait().ok()) << h.wait().to_string();
    HostTensor out = h.take_output();
    EXPECT_EQ(out.shape, (std::vector<int64_t>{r, 3}));
    const int64_t first = r * (r - 1) / 2;  // rows before this rank's share
    const double ranks = P * (P + 1) / 2.0;
    for (int64_t i = 0; i < r; ++i)
      for (int k = 0; k < 3; ++k)
        EXPECT_EQ(out.data_as<double>()[i * 3 + k], ranks * (first + i + 1)) << i;
    // The same name again with the even split: the cached response must not keep the counts.
    std::vector<float> even(2 * P, 1.0f);
    auto h2 = submit(c[r], build_reducescatter("rs.counts", view_of(even.data(), {2 * P}), {}, P));
    ASSERT_TRUE(h2.wait().ok()) << h2.wait().to_string();
    EXPECT_EQ(h2.output_shape(), (std::vector<int64_t>{2}));
    EXPECT_EQ(h2.take_output().data_as<float>()[1], static_cast<float>(P));
  });
}

// Ranks join one after the other; every rank's join reports the last one.
TEST_P(ApiOpsSizes, JoinReportsTheRankThatJoinedLast) {
  const int P = GetParam();
  for (int last = 0; last < P; ++last) {
    Cluster c(P);
    std::vector<Handle> joins(P);
    for (int r = 0; r < P; ++r) {
      if (r == last) continue;
      joins[r] = submit(c[r], build_join());
      // The others have joined before the last one does: a barrier of the non-joined would
      // not do (it runs without the joined), so the test waits for the coordinator to see it.
      std::this_thread::sleep_for(30ms);
    }
    joins[last] = submit(c[last], build_join());
    for (int r = 0; r < P; ++r) {
      ASSERT_TRUE(joins[r].wait().ok()) << joins[r].wait().to_string();
      EXPECT_EQ(joins[r].last_joined_rank(), last) << "rank " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, ApiOpsSizes, ::testing::Values(2, 3, 4));

TEST(ApiOps, RecvCountsThatDifferBetweenRanksAreAMismatchNamingThem) {
  Cluster c(3);
  c.each([&](int r) {
    std::vector<float> in(4, 1.0f);
    // First all ranks agree, so the response is cached; then rank 2 alone changes its counts:
    // its request misses the cache while the others' hit, and the coordinator must still see
    // the disagreement.
    auto agreed = submit(c[r], build_reducescatter("rs.bad", view_of(in.data(), {4}),
                                                   {.recv_counts = {2, 1, 1}}, 3));
    ASSERT_TRUE(agreed.wait().ok()) << agreed.wait().to_string();
    EXPECT_EQ(agreed.output_shape(), (std::vector<int64_t>{r == 0 ? 2 : 1}));
    std::vector<int64_t> counts =
        r == 2 ? std::vector<int64_t>{0, 2, 2} : std::vector<int64_t>{2, 1, 1};
    auto h = submit(
        c[r], build_reducescatter("rs.bad", view_of(in.data(), {4}), {.recv_counts = counts}, 3));
    EXPECT_EQ(h.wait().code(), StatusCode::kMismatch);
    EXPECT_EQ(h.wait().message(),
              "reducescatter 'rs.bad': recv_counts differs across ranks: ranks [0, 1] have "
              "[2, 1, 1]; rank 2 has [0, 2, 2]");
  });
}

}  // namespace
}  // namespace kolo::coord
