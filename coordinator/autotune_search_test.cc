#include "coordinator/autotune_search.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <tuple>

namespace kolo::coord {
namespace {

constexpr int64_t kKiB = 1024, kMiB = 1024 * kKiB;

// The runtime's three grids with its defaults: threshold 4 MiB, cycle 1 ms, bucket 4 MiB.
std::vector<SearchDimension> runtime_like_dims() {
  SearchDimension threshold{"threshold", log_grid(64 * kKiB, 64 * kMiB, true)};
  threshold.default_index = nearest_index(threshold.values, 4 * kMiB);
  SearchDimension cycle{"cycle", log_grid(100'000, 8'000'000)};
  cycle.default_index = nearest_index(cycle.values, 1'000'000);
  SearchDimension bucket{"bucket", log_grid(64 * kKiB, 64 * kMiB, true)};
  bucket.default_index = nearest_index(bucket.values, 4 * kMiB);
  return {threshold, cycle, bucket};
}

// A smooth bowl in log space around `optimum` (grid indices), 100 ms at the bottom, with
// multiplicative Gaussian noise of `noise` standard deviation.
struct Bowl {
  SearchPoint optimum;
  std::vector<double> curvature;
  double noise;
  std::mt19937 rng;
  double exact(const SearchPoint& p) const {
    double f = 0.1;
    for (size_t d = 0; d < p.size(); ++d) {
      const double x = static_cast<double>(p[d]) - static_cast<double>(optimum[d]);
      f *= 1 + curvature[d] * x * x;
    }
    return f;
  }
  double sample(const SearchPoint& p) {
    std::normal_distribution<double> n(0, noise);
    return exact(p) * std::max(0.5, 1 + n(rng));
  }
};

// Runs the search to convergence and returns (steps, final point).
std::pair<int, SearchPoint> run(AutotuneSearch& search, Bowl& bowl) {
  int guard = 0;
  while (!search.converged() && ++guard < 10'000) search.record_step(bowl.sample(search.current()));
  return {search.steps(), search.current()};
}

TEST(AutotuneSearchTest, LogGridDoublesAndKeepsBothEnds) {
  EXPECT_EQ(log_grid(1, 8), (std::vector<int64_t>{1, 2, 4, 8}));
  EXPECT_EQ(log_grid(3, 20), (std::vector<int64_t>{3, 6, 12, 20}));
  EXPECT_EQ(log_grid(5, 5, true), (std::vector<int64_t>{0, 5}));
  EXPECT_EQ(nearest_index({0, 1, 4, 16}, 5), 2u);
  EXPECT_EQ(nearest_index({0, 1, 4, 16}, 0), 0u);
  EXPECT_EQ(nearest_index({0, 1, 4, 16}, 100), 3u);
}

TEST(AutotuneSearchTest, MeasuresDefaultFirstThenThePrior) {
  auto dims = runtime_like_dims();
  SearchPoint start = {3, 1, 3};
  AutotuneSearch search(dims, start, {.warmup = 1, .samples = 2});
  EXPECT_EQ(search.current(), search.default_point());
  EXPECT_FALSE(search.record_step(1.0));  // warm-up
  EXPECT_FALSE(search.record_step(1.0));
  EXPECT_TRUE(search.record_step(1.0));
  auto trial = search.take_finished();
  ASSERT_TRUE(trial);
  EXPECT_EQ(trial->point, search.default_point());
  EXPECT_EQ(trial->steps, 3);
  EXPECT_DOUBLE_EQ(trial->seconds, 1.0);
  EXPECT_EQ(search.current(), start);
  EXPECT_FALSE(search.take_finished());
}

// The goal on synthetic workloads: within the 200-step budget, the final point's true
// step time is within 5% of the optimum's, for optima anywhere on the grid (edges too), with
// 2% noise per step (one grid step off the optimum costs 3-5%), over 80 seeded runs.
TEST(AutotuneSearchTest, ConvergesWithinBudgetToWithinFivePercentOfTheOptimum) {
  const auto dims = runtime_like_dims();
  const std::vector<SearchPoint> optima = {{0, 0, 0}, {11, 7, 11}, {3, 2, 9}, {10, 0, 1},
                                           {7, 3, 7}, {1, 6, 11},  {5, 4, 0}, {11, 1, 6}};
  int worst_steps = 0;
  double worst_ratio = 0;
  for (size_t i = 0; i < optima.size(); ++i) {
    for (unsigned seed = 0; seed < 10; ++seed) {
      Bowl bowl{optima[i], {0.04, 0.05, 0.03}, 0.02, std::mt19937(seed * 31 + i)};
      // A poor prior (the opposite corner) must not prevent convergence.
      AutotuneSearch search(dims, {6, 0, 6}, {});
      auto [steps, point] = run(search, bowl);
      ASSERT_TRUE(search.converged());
      worst_steps = std::max(worst_steps, steps);
      worst_ratio = std::max(worst_ratio, bowl.exact(point) / bowl.exact(optima[i]));
    }
  }
  EXPECT_LE(worst_steps, 200);
  EXPECT_LE(worst_ratio, 1.05);
}

TEST(AutotuneSearchTest, DefaultStaysWhenNothingBeatsItBeyondNoise) {
  const auto dims = runtime_like_dims();
  const SearchPoint def = {dims[0].default_index, dims[1].default_index, dims[2].default_index};
  for (unsigned seed = 0; seed < 20; ++seed) {
    // Flat within 1%: every difference is noise.
    Bowl bowl{def, {0.0005, 0.0005, 0.0005}, 0.03, std::mt19937(seed)};
    AutotuneSearch search(dims, {2, 1, 2}, {});
    auto [steps, point] = run(search, bowl);
    EXPECT_LE(bowl.exact(point) / bowl.exact(def), 1.02) << "seed " << seed;
  }
}

// On a shared machine the load changes while the search runs. Here the machine is twice as
// slow for the first 12 steps (another job finishing), which is when the default is measured:
// every later candidate then looks far better than the default, although the default is the
// optimum and everything else is 5% or more slower. The confirmation compares the best and the
// default measured side by side at the end, so the default must still win.
TEST(AutotuneSearchTest, ConfirmationComparesFreshSamplesWhenTheMachineSpeedsUp) {
  const auto dims = runtime_like_dims();
  const SearchPoint def = {dims[0].default_index, dims[1].default_index, dims[2].default_index};
  for (unsigned seed = 0; seed < 20; ++seed) {
    Bowl bowl{def, {0.05, 0.05, 0.05}, 0.01, std::mt19937(seed)};
    AutotuneSearch search(dims, def, {});
    int step = 0;
    while (!search.converged() && step < 10'000)
      search.record_step(bowl.sample(search.current()) * (step++ < 12 ? 2.0 : 1.0));
    ASSERT_TRUE(search.converged());
    EXPECT_EQ(search.current(), def) << "seed " << seed;
  }
}

// The mirror case: the machine slows down steadily while the confirmation runs (another job
// starting). The search ends on a point 1% faster than the default, which is less than the
// margin (2%) even after a second round (1.4%), so the default must stay. Measured
// best-then-default, the default's samples would fall in slower times and the best would win by
// 10%; the best's second measurement, after the default's, brackets it, so the slow-down weighs on
// both alike.
TEST(AutotuneSearchTest, ConfirmationIsFairWhenTheMachineSlowsDownDuringIt) {
  const auto dims = runtime_like_dims();
  const SearchPoint def = {dims[0].default_index, dims[1].default_index, dims[2].default_index};
  const SearchPoint near = {def[0] + 1, def[1], def[2]};
  int confirmed = 0;
  for (unsigned seed = 0; seed < 20; ++seed) {
    // The optimum one grid step from the default, 1% faster than it.
    Bowl bowl{near, {0.01, 0.2, 0.2}, 0.002, std::mt19937(seed)};
    AutotuneSearch search(dims, def, {});
    int confirming_steps = 0;
    while (!search.converged() && search.steps() < 10'000) {
      const double slower = search.confirming() ? 1.0 + 0.02 * confirming_steps++ : 1.0;
      search.record_step(bowl.sample(search.current()) * slower);
    }
    ASSERT_TRUE(search.converged());
    confirmed += confirming_steps > 0;
    EXPECT_EQ(search.current(), def) << "seed " << seed;
  }
  EXPECT_GT(confirmed, 15);  // the search reached the near point and confirmed it, mostly
}

// A gain between half the margin and the margin (here the 2% minimum gain, the noise being
// 0.2%) gets a second confirmation round, and then needs margin / sqrt(2) = 1.41%: a point 1.8%
// faster than the default is taken after six confirmation measurements; one 0.6% faster (less
// than half the margin) is not, after three. (0.8% was 1.3 standard deviations of a median of
// three from the 1% that opens a second round: one seed in ten may open it, and which one did
// moved when clear losers began to draw fewer samples.)
TEST(AutotuneSearchTest, AnAmbiguousGainGetsASecondConfirmationRound) {
  const auto dims = runtime_like_dims();
  const SearchPoint def = {dims[0].default_index, dims[1].default_index, dims[2].default_index};
  const SearchPoint near = {def[0] + 1, def[1], def[2]};
  for (auto [gain, taken, confirmations] :
       {std::tuple{0.018, true, 6}, std::tuple{0.006, false, 3}}) {
    for (unsigned seed = 0; seed < 10; ++seed) {
      Bowl bowl{near, {gain, 0.2, 0.2}, 0.002, std::mt19937(seed)};
      AutotuneSearch search(dims, def, {});
      int confirmed = 0;
      while (!search.converged() && search.steps() < 10'000) {
        search.record_step(bowl.sample(search.current()));
        if (auto trial = search.take_finished(); trial && trial->confirmation) ++confirmed;
      }
      ASSERT_TRUE(search.converged());
      EXPECT_LE(search.steps(), 200);
      EXPECT_EQ(search.current(), taken ? near : def) << "gain " << gain << ", seed " << seed;
      EXPECT_EQ(confirmed, confirmations) << "gain " << gain << ", seed " << seed;
    }
  }
}

TEST(AutotuneSearchTest, FixedDimensionsAreNeverChanged) {
  auto dims = runtime_like_dims();
  dims[1].values = {2'000'000};  // the user set the cycle time
  dims[1].default_index = 0;
  Bowl bowl{{9, 0, 2}, {0.04, 0.05, 0.03}, 0.02, std::mt19937(7)};
  AutotuneSearch search(dims, {6, 0, 6}, {});
  while (!search.converged()) {
    ASSERT_EQ(search.current()[1], 0u);
    search.record_step(bowl.sample(search.current()));
  }
  EXPECT_LE(bowl.exact(search.current()) / bowl.exact({9, 0, 2}), 1.05);
}

TEST(AutotuneSearchTest, CategoricalDimensionTriesEveryChoice) {
  auto dims = runtime_like_dims();
  dims.push_back({"hierarchical", {0, 1}, 0, true});
  // Choice 1 is 30% faster everywhere.
  Bowl bowl{{5, 2, 5, 1}, {0.04, 0.05, 0.03, 0.3}, 0.02, std::mt19937(3)};
  AutotuneSearch search(dims, {6, 3, 6, 0}, {});
  run(search, bowl);
  EXPECT_EQ(search.current()[3], 1u);
}

// The hierarchical allreduce as the runtime searches it (a categorical dimension after the
// three numeric ones, default 0 = flat), on a score where the two paths differ jointly with the
// numeric knobs: each path is its own bowl, the hierarchical one's threshold and bucket optima
// two grid steps higher (its stages want larger buffers), its bottom `ratio` times the flat
// one's. So the other path loses at the first descent's optimum and wins only at its own: it
// needs a descent of its own (Note [Autotune search]). With 2% noise, over 20 seeds each:
// within the budget (200 steps, 100 more for the categorical alternative) the search ends on
// the faster path, within 5% of the global optimum, whether the hierarchy wins by 20% or loses
// by 15%.
TEST(AutotuneSearchTest, CategoricalDimensionConvergesToTheBetterChoiceJointly) {
  auto dims = runtime_like_dims();
  dims.push_back({"hierarchical_allreduce", {0, 1}, 0, true});
  for (double ratio : {0.8, 1.15}) {
    SCOPED_TRACE("hierarchical/flat " + std::to_string(ratio));
    const size_t better = ratio < 1 ? 1 : 0;
    int worst_steps = 0;
    double worst = 0;
    for (unsigned seed = 0; seed < 20; ++seed) {
      std::mt19937 rng(seed * 7 + 1);
      Bowl flat{{4, 2, 4}, {0.04, 0.05, 0.03}, 0, rng};
      Bowl hier{{6, 2, 6}, {0.04, 0.05, 0.03}, 0, rng};
      auto exact = [&](const SearchPoint& p) {
        const SearchPoint numeric(p.begin(), p.begin() + 3);
        return p[3] == 1 ? hier.exact(numeric) * ratio : flat.exact(numeric);
      };
      const double optimum = std::min(flat.exact({4, 2, 4}), hier.exact({6, 2, 6}) * ratio);
      AutotuneSearch search(dims, {6, 0, 6, 0}, {});
      std::normal_distribution<double> noise(0, 0.02);
      int guard = 0;
      while (!search.converged() && ++guard < 10'000)
        search.record_step(exact(search.current()) * std::max(0.5, 1 + noise(rng)));
      ASSERT_TRUE(search.converged());
      EXPECT_EQ(search.current()[3], better) << "seed " << seed;
      worst_steps = std::max(worst_steps, search.steps());
      worst = std::max(worst, exact(search.current()) / optimum);
    }
    EXPECT_LE(worst_steps, 300);
    EXPECT_LE(worst, 1.05);
  }
}

TEST(AutotuneSearchTest, RestartLocalSearchesAgainAroundTheBest) {
  const auto dims = runtime_like_dims();
  Bowl bowl{{5, 2, 5}, {0.04, 0.05, 0.03}, 0.01, std::mt19937(1)};
  AutotuneSearch search(dims, {5, 2, 5}, {});
  run(search, bowl);
  EXPECT_EQ(search.current(), (SearchPoint{5, 2, 5}));
  // The machine changed: the optimum moved one step along each axis.
  bowl.optimum = {6, 3, 4};
  search.restart_local();
  EXPECT_FALSE(search.converged());
  const int before = search.steps();
  run(search, bowl);
  EXPECT_LE(search.steps() - before, 200);
  EXPECT_LE(bowl.exact(search.current()) / bowl.exact({6, 3, 4}), 1.05);
}

TEST(AutotuneSearchTest, PriorPredictsFromLatencyAndBandwidth) {
  // 50 us and 1 GB/s: crossover 50 kB, threshold and bucket 800 kB, cycle 100 us.
  PriorValues v = predict_start({50e-6, 1e9});
  EXPECT_EQ(v.fusion_threshold, 800'000);
  EXPECT_EQ(v.bucket_bytes, 800'000);
  EXPECT_EQ(v.cycle_time_ns, 100'000);
}

}  // namespace
}  // namespace kolo::coord

namespace kolo::coord {
namespace {

// Issue 30: the runtime's search (KOLO_AUTOTUNE_STEPS=90, 3 samples, stride 2 first) in
// kolo-bench autotune's box (thresholds and buckets 0 and 1-64 MiB, cycles 250 us-4 ms) with the
// runtime's change lag (two skipped steps after a new bucket size, one otherwise, no warm-up then)
// settles within 100 steps, with 2% noise, over 9 optima up to two grid steps from the defaults
// in every dimension x 10 seeds: within 5% of the optimum in at least 75 of the 90 runs, and
// never more than one grid step off in two dimensions (7%; measured: 77 of 90 within 5%, the
// rest at 1.071, mostly where the optimum is two steps off in all three dimensions). Stride 1
// first did better on most runs (88 of 90) and worse on the others (1.16), stride 4 goes to
// the box's ends.
TEST(AutotuneSearchTest, RuntimeBudgetSettlesWithinOneHundredStepsNearTheOptimum) {
  SearchDimension threshold{"threshold", log_grid(kMiB, 64 * kMiB, true), 3};
  SearchDimension cycle{"cycle", log_grid(250'000, 4'000'000), 2};
  SearchDimension bucket{"bucket", log_grid(kMiB, 64 * kMiB, true), 3};
  const std::vector<SearchDimension> dims = {threshold, cycle, bucket};
  const std::vector<SearchPoint> optima = {{3, 2, 3}, {1, 0, 1}, {5, 4, 5}, {2, 1, 3}, {4, 2, 2},
                                           {3, 0, 4}, {1, 2, 5}, {5, 3, 1}, {2, 4, 2}};
  int worst_steps = 0, within_5_percent = 0;
  double worst_ratio = 0;
  for (size_t i = 0; i < optima.size(); ++i) {
    for (unsigned seed = 0; seed < 10; ++seed) {
      Bowl bowl{optima[i], {0.04, 0.05, 0.03}, 0.02, std::mt19937(seed * 17 + i)};
      AutotuneSearch search(dims, {2, 1, 2},
                            {.samples = 3, .max_steps = 90, .lag = 2, .initial_stride = 2});
      int guard = 0;
      while (!search.converged() && ++guard < 10'000) {
        const size_t bucket_before = search.current()[2];
        if (!search.record_step(bowl.sample(search.current()))) continue;
        // The runtime's lag: the step in progress, and one more for new buckets.
        search.skip_step();
        if (search.current()[2] != bucket_before) {
          search.skip_step();
        } else {
          search.skip_warmup();
        }
      }
      ASSERT_TRUE(search.converged());
      worst_steps = std::max(worst_steps, search.steps());
      const double ratio = bowl.exact(search.current()) / bowl.exact(optima[i]);
      worst_ratio = std::max(worst_ratio, ratio);
      within_5_percent += ratio <= 1.05;
    }
  }
  EXPECT_LE(worst_steps, 95);
  EXPECT_GE(within_5_percent, 75);
  EXPECT_LE(worst_ratio, 1.04 * 1.03 + 1e-9);
}

}  // namespace
}  // namespace kolo::coord
