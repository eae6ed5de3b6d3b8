#include "coordinator/autotune.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <set>
#include <sstream>

namespace kolo::coord {
namespace {

using Clock = Tuner::Clock;

std::string temp_csv(const std::string& name) {
  return ::testing::TempDir() + "kolo_autotune_" + std::to_string(::getpid()) + "_" + name;
}

int rows_of(const std::string& path) {
  std::ifstream in(path);
  int n = -1;  // the header
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

// Drives a Tuner as the runtime does: one cycle per step, each step `step_ms` long, decisions
// taken in the next cycle.
struct Driver {
  Tuner& tuner;
  Clock::time_point now = Clock::time_point{} + std::chrono::seconds(1);
  int64_t steps = 0;
  std::vector<TuneDecision> decisions;

  void marked_steps(int n, double step_ms) {
    for (int i = 0; i < n; ++i) {
      now += std::chrono::microseconds(static_cast<int64_t>(step_ms * 1000));
      ++steps;
      tuner.observe({now}, {}, now);
      if (auto d = tuner.take_decision(steps)) decisions.push_back(*d);
    }
  }
};

RuntimeConfig tuned_config(const std::string& csv, bool continuous) {
  RuntimeConfig c = config_from_knobs(KnobSet::defaults(), "tcp").value();
  c.autotune.categorical.clear();  // each test adds the categorical dimensions it studies
  c.autotune.enabled = true;
  c.autotune.log_path = csv;
  c.autotune.continuous = continuous;
  c.autotune.samples = 1;
  return c;
}

TEST(TunerTest, ContinuousModeSearchesAgainAfterASustainedChangeOnly) {
  for (bool continuous : {false, true}) {
    const std::string csv = temp_csv(continuous ? "continuous.csv" : "once.csv");
    Timeline timeline;
    auto tuner = Tuner::create(tuned_config(csv, continuous), timeline);
    ASSERT_TRUE(tuner.ok()) << tuner.status().to_string();
    (*tuner)->set_link({50e-6, 1e9});
    Driver driver{**tuner};
    // Every configuration is equally fast: the search ends (on the default) well within 300.
    driver.marked_steps(300, 10.0);
    const int converged_rows = rows_of(csv);
    ASSERT_GT(converged_rows, 3);
    const TuneDecision last = driver.decisions.back();
    EXPECT_EQ(last.fusion_threshold, uint64_t{4} << 20);
    EXPECT_EQ(last.cycle_time_ns, 1'000'000);
    EXPECT_EQ(last.bucket_bytes, kDefaultBucketBytes);
    // A short blip changes nothing; a sustained doubling restarts a local search.
    driver.marked_steps(3, 20.0);
    driver.marked_steps(40, 10.0);
    EXPECT_EQ(rows_of(csv), converged_rows);
    driver.marked_steps(60, 20.0);
    if (continuous)
      EXPECT_GT(rows_of(csv), converged_rows);
    else
      EXPECT_EQ(rows_of(csv), converged_rows);
    std::remove(csv.c_str());
  }
}

TEST(TunerTest, ProgramsThatMarkNoStepsAreTunedByTheirRepeatingNames) {
  Timeline timeline;
  auto tuner = Tuner::create(tuned_config("", false), timeline);
  ASSERT_TRUE(tuner.ok());
  (*tuner)->set_link({50e-6, 1e9});
  Response a, b;
  a.name = "grad.a";
  b.name = "grad.b";
  auto now = Clock::time_point{} + std::chrono::seconds(1);
  std::vector<TuneDecision> decisions;
  for (int period = 0; period < 200; ++period) {
    now += std::chrono::milliseconds(5);
    (*tuner)->observe({}, {a}, now);
    now += std::chrono::milliseconds(5);
    (*tuner)->observe({}, {b}, now);
    if (auto d = (*tuner)->take_decision(0)) decisions.push_back(*d);
  }
  ASSERT_FALSE(decisions.empty());
  for (const auto& d : decisions) {
    EXPECT_EQ(d.bucket_bytes, kDefaultBucketBytes);  // no DistributedOptimizer: not searched
    EXPECT_EQ(d.apply_step, 2);                      // no marks: steps_marked() stays 0
  }
}

std::vector<std::vector<std::string>> csv_rows(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::vector<std::string>> rows;
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> fields;
    std::stringstream ss(line);
    for (std::string f; std::getline(ss, f, ',');) fields.push_back(f);
    rows.push_back(std::move(fields));
  }
  return rows;
}

// KOLO_HIERARCHICAL_ALLREDUCE as a categorical dimension (the registry marks it; config_from_knobs
// lists it): searched, the decisions carry its choice and the search ends on the faster path
// (here the hierarchy, 40% faster whatever else is chosen); fixed (set by the user, or a job
// that cannot switch it), no decision names it. The CSV has its column either way.
TEST(TunerTest, CategoricalKnobIsSearchedUnlessFixed) {
  for (bool fixed : {false, true}) {
    SCOPED_TRACE(fixed ? "fixed" : "searched");
    const std::string csv = temp_csv(fixed ? "cat_fixed.csv" : "cat_searched.csv");
    RuntimeConfig c = tuned_config(csv, false);
    ASSERT_EQ(c.autotune.categorical.size(), 0u);  // tuned_config() lists none
    c.autotune.categorical.push_back(
        {KnobId::kHierarchicalAllreduce, {"0", "1"}, /*initial=*/0, fixed});
    Timeline timeline;
    auto tuner = Tuner::create(c, timeline);
    ASSERT_TRUE(tuner.ok()) << tuner.status().to_string();
    (*tuner)->set_link({50e-6, 1e9});
    auto now = Clock::time_point{} + std::chrono::seconds(1);
    std::vector<TuneDecision> decisions;
    bool hierarchical = false;  // as applied, from each decision's apply_step on
    for (int64_t step = 1; step <= 250; ++step) {
      for (const auto& d : decisions)
        if (d.apply_step == step)
          for (const TunedChoice& ch : d.choices) hierarchical = ch.choice == 1;
      now += std::chrono::milliseconds(hierarchical ? 6 : 10);
      (*tuner)->observe({now}, {}, now);
      if (auto d = (*tuner)->take_decision(step)) decisions.push_back(*d);
    }
    ASSERT_FALSE(decisions.empty());
    bool named = false;
    for (const auto& d : decisions) {
      for (const TunedChoice& ch : d.choices) {
        EXPECT_EQ(ch.knob, static_cast<int32_t>(KnobId::kHierarchicalAllreduce));
        named = true;
      }
      EXPECT_EQ(d.choices.size(), fixed ? 0u : 1u);
    }
    EXPECT_EQ(named, !fixed);
    if (!fixed) {
      EXPECT_EQ(decisions.back().choices.at(0).choice, 1);
    }
    const auto rows = csv_rows(csv);
    ASSERT_GE(rows.size(), 3u);
    EXPECT_EQ(rows[0],
              (std::vector<std::string>{"step", "fusion_threshold_bytes", "cycle_time_us",
                                        "bucket_bytes", "hierarchical_allreduce", "step_time_ms",
                                        "steps", "ratio_to_default", "best_so_far", "phase"}));
    std::set<std::string> column;
    for (size_t r = 1; r < rows.size(); ++r) {
      ASSERT_EQ(rows[r].size(), 10u);
      column.insert(rows[r][4]);
    }
    const std::set<std::string> expected =
        fixed ? std::set<std::string>{"0"} : std::set<std::string>{"0", "1"};
    EXPECT_EQ(column, expected);
    std::remove(csv.c_str());
  }
}

TEST(TunerTest, UnwritableLogIsAnErrorNamingTheVariable) {
  Timeline timeline;
  auto tuner = Tuner::create(tuned_config("/nonexistent-dir/x.csv", false), timeline);
  ASSERT_FALSE(tuner.ok());
  EXPECT_EQ(tuner.status().code(), StatusCode::kIoError);
  EXPECT_EQ(tuner.status().message(),
            "KOLO_AUTOTUNE_LOG=/nonexistent-dir/x.csv: cannot open for writing: No such file or "
            "directory");
}

}  // namespace
}  // namespace kolo::coord
