// Data-parallel training through real processes (kolorun, TCP backend): P ranks with uneven
// local batches give the parameters of 1 rank, communication progresses during backward,
// broadcast makes replicas identical, and a checkpoint resumes exactly.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/run_command.h"

namespace {

namespace fs = std::filesystem;

class TrainingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kolo_training_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Starts the worker on `np` ranks; fails the test (with the output) unless it exits 0.
  std::string launch(int np, const std::string& args) {
    kolo::testing::ProcessRun r =
        kolo::testing::run_command(std::string(KOLORUN_PATH) + " -np " + std::to_string(np) + " " +
                                       TRAINING_WORKER_PATH + " " + args,
                                   /*timeout_s=*/120);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return r.output;
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

using Params = std::map<std::string, std::vector<double>>;

Params read_params(const std::string& path) {
  Params params;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string name;
    fields >> name;
    double v;
    while (fields >> v) params[name].push_back(v);
  }
  return params;
}

// Equal up to float rounding: the reductions sum in a different order than one rank does.
void expect_close(const Params& a, const Params& b, double tolerance) {
  ASSERT_GE(a.size(), 4u);
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, values] : a) {
    const auto& other = b.at(name);
    ASSERT_EQ(values.size(), other.size()) << name;
    for (size_t i = 0; i < values.size(); ++i) {
      EXPECT_NEAR(values[i], other[i], tolerance * (1.0 + std::fabs(values[i])))
          << name << "[" << i << "]";
    }
  }
}

// The tolerance of the equivalence tests: 5 steps of float32 arithmetic in different orders.
constexpr double kTolerance = 2e-5;

TEST_F(TrainingTest, UnevenBatchesOnTwoAndThreeRanksMatchOneRank) {
  launch(1, "--steps 5 --out " + path("p1"));
  launch(2, "--steps 5 --out " + path("p2"));
  launch(3, "--steps 5 --out " + path("p3"));
  const Params one = read_params(path("p1"));
  expect_close(read_params(path("p2")), one, kTolerance);
  expect_close(read_params(path("p3")), one, kTolerance);
}

TEST_F(TrainingTest, GradientAccumulationOverTwoPassesMatchesOnePass) {
  launch(1, "--steps 4 --out " + path("single"));
  launch(2, "--steps 4 --passes 2 --out " + path("accumulated"));
  expect_close(read_params(path("accumulated")), read_params(path("single")), kTolerance);
}

TEST_F(TrainingTest, AllreducesCompleteWhileBackwardStillRuns) {
  std::string output = launch(2, "--mode overlap --steps 3");
  EXPECT_NE(output.find("[0] overlap ok: 3 steps"), std::string::npos) << output;
  EXPECT_NE(output.find("[1] overlap ok: 3 steps"), std::string::npos) << output;
}

TEST_F(TrainingTest, SyncBatchNormOnTwoAndThreeRanksMatchesOneRankBatchNorm) {
  launch(1, "--mode syncbn --steps 4 --out " + path("s1"));
  launch(2, "--mode syncbn --steps 4 --out " + path("s2"));
  launch(3, "--mode syncbn --steps 4 --out " + path("s3"));
  const Params one = read_params(path("s1"));
  ASSERT_EQ(one.size(), 8u);  // 4 linear + gamma, beta + running mean, var
  expect_close(read_params(path("s2")), one, kTolerance);
  expect_close(read_params(path("s3")), one, kTolerance);
}

TEST_F(TrainingTest, BroadcastParametersMakesEveryRankEqualToTheRoot) {
  launch(3, "--mode broadcast --out " + path("b"));
  const Params root = read_params(path("b.1"));
  // Exact: broadcast copies bytes.
  expect_close(read_params(path("b.0")), root, 0.0);
  expect_close(read_params(path("b.2")), root, 0.0);
}

TEST_F(TrainingTest, CheckpointResumeContinuesExactly) {
  const std::string ckpt = path("ckpt.kolo");
  launch(2, "--mode checkpoint --steps 6 --save-at 3 --ckpt " + ckpt + " --out " + path("full"));
  ASSERT_TRUE(fs::exists(ckpt));
  launch(2, "--mode checkpoint --steps 6 --resume --ckpt " + ckpt + " --out " + path("resumed"));
  expect_close(read_params(path("resumed")), read_params(path("full")), 0.0);
}

}  // namespace
