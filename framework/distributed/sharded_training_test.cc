// ZeRO stages 1 and 2 through real processes (kolorun): 2, 3 and 4 ranks with uneven local
// batches train 20 steps with every optimizer and end with the parameters of the unsharded
// one-rank run (sharded_worker.cc --stage 0) up to float rounding; each rank holds 1/N of the
// optimizer state; mismatched settings fail on every rank naming the setting.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/run_command.h"

namespace {

namespace fs = std::filesystem;
using Params = std::map<std::string, std::vector<double>>;

class ShardedTrainingTest : public ::testing::Test {
 public:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kolo_zero_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  kolo::testing::ProcessRun run(int np, const std::string& args, const std::string& env = "") {
    using kolo::testing::program_path;
    return kolo::testing::run_command(env + " " + program_path(KOLORUN_PATH) + " -np " +
                                          std::to_string(np) + " " +
                                          program_path(SHARDED_WORKER_PATH) + " " + args,
                                      /*timeout_s=*/120);
  }
  std::string launch(int np, const std::string& args) {
    kolo::testing::ProcessRun r = run(np, args);
    EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.output;
    return r.output;
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

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

// Equal up to float rounding: the reductions sum in another order than one rank does, and 20
// steps let the difference grow a little.
constexpr double kTolerance = 5e-5;

void expect_close(const Params& a, const Params& b, const std::string& what) {
  ASSERT_EQ(a.size(), 4u) << what;
  ASSERT_EQ(a.size(), b.size()) << what;
  for (const auto& [name, values] : a) {
    const auto& other = b.at(name);
    ASSERT_EQ(values.size(), other.size()) << what << " " << name;
    for (size_t i = 0; i < values.size(); ++i) {
      ASSERT_NEAR(values[i], other[i], kTolerance * (1.0 + std::fabs(values[i])))
          << what << ": " << name << "[" << i << "]";
    }
  }
}

// The reference and the sharded runs of one configuration on 2, 3 and 4 ranks, stages 1 and 2.
void matches_unsharded(ShardedTrainingTest& t, const std::string& args,
                       std::vector<int> worlds = {2, 3, 4}) {
  t.launch(1, "--stage 0 " + args + " --out " + t.path("ref"));
  const Params ref = read_params(t.path("ref"));
  for (int np : worlds) {
    for (int stage : {1, 2}) {
      const std::string name = "s" + std::to_string(stage) + "n" + std::to_string(np);
      t.launch(np, "--stage " + std::to_string(stage) + " " + args + " --out " + t.path(name));
      expect_close(
          read_params(t.path(name)), ref,
          args + " stage " + std::to_string(stage) + " on " + std::to_string(np) + " ranks");
    }
  }
}

TEST_F(ShardedTrainingTest, SgdMomentumWeightDecayMatchesUnsharded) {
  matches_unsharded(*this, "--optimizer sgd");
}
TEST_F(ShardedTrainingTest, NesterovMatchesUnsharded) {
  matches_unsharded(*this, "--optimizer nesterov");
}
TEST_F(ShardedTrainingTest, AdamMatchesUnsharded) { matches_unsharded(*this, "--optimizer adam"); }
TEST_F(ShardedTrainingTest, AdamWMatchesUnsharded) {
  matches_unsharded(*this, "--optimizer adamw");
}
TEST_F(ShardedTrainingTest, LarsMatchesUnsharded) { matches_unsharded(*this, "--optimizer lars"); }
// A small max norm, so that every step clips.
TEST_F(ShardedTrainingTest, GlobalNormClippingMatchesUnsharded) {
  matches_unsharded(*this, "--optimizer adam --clip 0.05");
  matches_unsharded(*this, "--optimizer lars --clip 0.05");
}
// Ranks 1 and 2 of 3 shard over their process set (set ranks 0 and 1); rank 0 trains nothing.
TEST_F(ShardedTrainingTest, AProcessSetWithoutRankZeroMatchesUnsharded) {
  launch(1, "--stage 0 --optimizer adamw --out " + path("ref"));
  launch(3, "--stage 2 --optimizer adamw --on-set --out " + path("set"));
  expect_close(read_params(path("set")), read_params(path("ref")), "process set {1, 2}");
}

// With fp16/bf16 compression each rank's gradient is rounded before the sum, so the reference
// is DistributedOptimizer with the same compression on the same ranks: the reduce-scatter sums
// the same 16-bit values that its allreduce sums.
TEST_F(ShardedTrainingTest, CompressedShardsMatchCompressedDataParallel) {
  for (const std::string c : {"fp16", "bf16"}) {
    for (int np : {2, 3}) {
      const std::string args = "--optimizer adam --steps 8 --compression " + c;
      launch(np, "--dp " + args + " --out " + path("dp"));
      const Params ref = read_params(path("dp"));
      for (int stage : {1, 2}) {
        launch(np, "--stage " + std::to_string(stage) + " " + args + " --out " + path("z"));
        expect_close(read_params(path("z")), ref,
                     c + " stage " + std::to_string(stage) + " on " + std::to_string(np));
      }
    }
  }
}

// ---- CUDA parameters (skipped without a GPU; listed in scripts/gpu-check.sh) -----------------

// Stages 1 and 2 with CUDA parameters on 2 ranks, against the unsharded one-rank run on the GPU
// (as the CPU tests above; --hidden 15 makes a bucket of 79 elements, shards of 40 and 39), and
// bf16 compression against DistributedOptimizer on the GPU. `env` picks the GPU operations:
// the nccl backend (one GPU per rank) or tcp through host staging.
void cuda_matches_unsharded(ShardedTrainingTest& t, const std::string& env, int need_gpus) {
  const std::string cuda = "--device cuda --need-gpus " + std::to_string(need_gpus) + " ";
  const kolo::testing::ProcessRun probe = t.run(1, cuda + "--stage 0 --steps 1");
  if (probe.output.find("no CUDA device") != std::string::npos)
    GTEST_SKIP() << probe.output;  // says how many GPUs are visible and needed
  auto launch = [&](int np, const std::string& args) {
    const kolo::testing::ProcessRun r = t.run(np, cuda + args, env);
    ASSERT_EQ(r.exit_code, 0) << env << " " << args << "\n" << r.output;
  };
  for (const std::string args :
       {"--optimizer sgd", "--optimizer adam", "--optimizer lars", "--optimizer adam --clip 0.05",
        "--optimizer lars --clip 0.05", "--optimizer adam --hidden 15"}) {
    launch(1, "--stage 0 " + args + " --out " + t.path("ref"));
    for (int stage : {1, 2}) {
      launch(2, "--stage " + std::to_string(stage) + " " + args + " --out " + t.path("z"));
      expect_close(read_params(t.path("z")), read_params(t.path("ref")),
                   env + " " + args + " stage " + std::to_string(stage));
    }
  }
  const std::string bf16 = "--optimizer adam --steps 8 --compression bf16";
  launch(2, "--dp " + bf16 + " --out " + t.path("dp"));
  launch(2, "--stage 2 " + bf16 + " --out " + t.path("z"));
  expect_close(read_params(t.path("z")), read_params(t.path("dp")), env + " " + bf16);
}

// Two ranks may share one GPU: their CUDA buffers are staged through the host to tcp.
TEST_F(ShardedTrainingTest, CudaParametersThroughHostStagingMatchUnsharded) {
  cuda_matches_unsharded(*this, "KOLO_GPU_OPERATIONS=tcp", 1);
}
// One GPU per rank: reducescatter with recv_counts (one ncclReduce per shard) and the in-place
// allgather on the nccl backend.
TEST_F(ShardedTrainingTest, CudaParametersOnNcclMatchUnsharded) {
  cuda_matches_unsharded(*this, "", 2);
}

TEST_F(ShardedTrainingTest, PassesNoSyncAndOneBucketPerParameterMatchUnsharded) {
  matches_unsharded(*this, "--optimizer adam --passes 2 --steps 8");
  matches_unsharded(*this, "--optimizer sgd --passes 2 --nosync --steps 8");
  matches_unsharded(*this, "--optimizer adamw --bucket-bytes 0 --steps 8");
}

// A rank that does not shard at all (DistributedOptimizer, whose constructor is not collective)
// never joins the settings check: it goes on to its gradient allreduces while the others wait in
// the check's allgather, and Kolo's mismatch detection (KOLO_MISMATCH_TIME, 10 s by default)
// fails every rank naming what each waits in.
TEST_F(ShardedTrainingTest, ARankThatDoesNotShardIsNamedOnEveryRank) {
  const kolo::testing::ProcessRun r =
      run(2, "--stage 1 --rank1-stage 0 --steps 2", "KOLO_MISMATCH_TIME=2s");
  EXPECT_NE(r.exit_code, 0) << r.output;
  for (const char* rank : {"[0]", "[1]"}) {
    EXPECT_NE(r.output.find(std::string(rank) +
                            " sharded_worker: Mismatch: mismatched collectives: rank 0 waits in "
                            "allgather 'kolo.optimizer.__settings__'; rank 1 waits in allreduce"),
              std::string::npos)
        << rank << "\n"
        << r.output;
  }
}

// A bucket smaller than the set: with --hidden 2 and a bucket per parameter, fc1.bias has 2
// elements, so on 3 and 4 ranks some ranks own nothing of it (empty reduce-scatter and
// allgather slots, no state), and LARS' norms and clipping still see the whole tensors.
TEST_F(ShardedTrainingTest, RanksWithEmptyShardsMatchUnsharded) {
  matches_unsharded(*this, "--optimizer lars --clip 0.05 --hidden 2 --bucket-bytes 0", {3, 4});
  matches_unsharded(*this, "--optimizer adam --hidden 2 --bucket-bytes 0", {4});
}

// Optimizer state per rank: the bucket shards' counts (Note [Shard layout]) times 4 bytes per
// slot. Buckets (bucket_bytes 400): {fc2.bias, fc2.weight, fc1.bias} 84 floats, {fc1.weight} 128.
// Stage 2 keeps only the shard's gradient after the step; stage 1 the whole local gradient.
// The allocator's peak of optimizer state equals the slices: the whole state never existed
// (the wrapped optimizer allocates its state lazily, and the sharded one takes slices only).
TEST_F(ShardedTrainingTest, EachRankHoldsItsShareOfStateAndStageTwoOfGradients) {
  const std::string two = launch(2, "--stage 1 --optimizer sgd --steps 2");
  for (int r = 0; r < 2; ++r)  // 42 + 64 floats each; gradients 212 + 106 floats
    EXPECT_EQ(kolo::testing::count_occurrences(
                  two, "[" + std::to_string(r) + "] memory state=424 grads=1272 "),
              1)
        << two;
  EXPECT_EQ(kolo::testing::count_occurrences(two, " allocator_state_peak=424\n"), 2) << two;
  const std::string three = launch(3, "--stage 2 --optimizer sgd --steps 2");
  // 28 + 43, 28 + 43, 28 + 42 floats: state and gradient alike.
  EXPECT_EQ(kolo::testing::count_occurrences(three, "[0] memory state=284 grads=284 "), 1) << three;
  EXPECT_EQ(kolo::testing::count_occurrences(three, "[1] memory state=284 grads=284 "), 1) << three;
  EXPECT_EQ(kolo::testing::count_occurrences(three, "[2] memory state=280 grads=280 "), 1) << three;
  EXPECT_EQ(kolo::testing::count_occurrences(three, " allocator_state_peak=284\n"), 2) << three;
  EXPECT_EQ(kolo::testing::count_occurrences(three, " allocator_state_peak=280\n"), 1) << three;
  const std::string four = launch(4, "--stage 2 --optimizer adam --steps 2");
  for (int r = 0; r < 4; ++r)  // 21 + 32 floats, two slots
    EXPECT_EQ(kolo::testing::count_occurrences(
                  four, "[" + std::to_string(r) + "] memory state=424 grads=212 "),
              1)
        << four;
  EXPECT_EQ(kolo::testing::count_occurrences(four, " allocator_state_peak=424\n"), 4) << four;
}

TEST_F(ShardedTrainingTest, RanksThatDisagreeOnTheStageFailNamingIt) {
  const kolo::testing::ProcessRun r = run(2, "--stage 1 --rank1-stage 2 --steps 1");
  EXPECT_NE(r.exit_code, 0) << r.output;
  const std::string expected =
      "disagree on the optimizer setting 'sharding' (rank 0: stage 1 (optimizer state), rank 1: "
      "stage 2 (gradients)); every rank must construct its optimizer alike";
  EXPECT_NE(r.output.find("[0] sharded_worker: Mismatch: ShardedOptimizer: ranks of the global "
                          "process set " +
                          expected),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("[1] sharded_worker: Mismatch"), std::string::npos) << r.output;
}

// A checkpoint saved by 4 ranks (stage 2) after 10 of 20 steps resumes on 3 ranks (stage 1)
// and ends where the unsharded run ends; one consolidated by 3 ranks after 10 steps resumes in
// the unsharded one-rank run (load_checkpoint) and on 2 sharded ranks
// (load_unsharded_checkpoint) likewise.
TEST_F(ShardedTrainingTest, FourRankCheckpointResumesOnThreeRanksAndConsolidates) {
  for (const std::string optimizer : {"adam", "sgd"}) {
    const std::string o = "--optimizer " + optimizer + " ";
    launch(1, "--stage 0 " + o + "--out " + path("ref"));
    const Params ref = read_params(path("ref"));
    launch(4, "--stage 2 " + o + "--save-at 10 --ckpt " + path("four") + " --out " + path("p4"));
    launch(3, "--stage 1 " + o + "--resume-from-shards 4 --ckpt " + path("four") + " --out " +
                  path("p3"));
    expect_close(read_params(path("p4")), ref, optimizer + " 4 ranks, saving");
    expect_close(read_params(path("p3")), ref, optimizer + " resumed on 3 ranks");
    launch(3, "--stage 2 " + o + "--steps 10 --consolidate " + path("whole"));
    launch(1, "--stage 0 " + o + "--resume-unsharded " + path("whole") + " --out " + path("p1"));
    expect_close(read_params(path("p1")), ref, optimizer + " consolidated, resumed unsharded");
    launch(2, "--stage 2 " + o + "--resume-unsharded " + path("whole") + " --out " + path("p2"));
    expect_close(read_params(path("p2")), ref, optimizer + " consolidated, resumed on 2 ranks");
  }
}

// Every rank fails alike (exit 3) with the message of the rank that found the problem, its
// model and optimizer state untouched; the files are left as they were.
TEST_F(ShardedTrainingTest, BadCheckpointsFailOnEveryRankNamingWhatDiffered) {
  launch(4, "--stage 1 --optimizer adam --steps 3 --save-at 2 --ckpt " + path("c"));
  auto expect_failure = [&](int np, const std::string& args, const std::string& what) {
    const kolo::testing::ProcessRun r = run(np, "--stage 1 " + args + " --ckpt " + path("c"));
    EXPECT_NE(r.exit_code, 0) << r.output;
    for (int rank = 0; rank < np; ++rank)
      EXPECT_EQ(kolo::testing::count_occurrences(
                    r.output, "[" + std::to_string(rank) + "] checkpoint failed: "),
                1)
          << r.output;
    EXPECT_EQ(kolo::testing::count_occurrences(r.output, what), np) << r.output;
    EXPECT_EQ(kolo::testing::count_occurrences(r.output, "] state unchanged"), np) << r.output;
  };
  expect_failure(2, "--optimizer adam --resume-from-shards 3",
                 "shard file '" + path("c") + ".shard0-of-3' of the 3-shard checkpoint '" +
                     path("c") +
                     "' does not exist (the files there are of a 4-shard checkpoint: pass that "
                     "shard count)");
  expect_failure(2, "--optimizer sgd --resume-from-shards 4",
                 "holds the state of optimizer 'Adam', this one is 'SGD'");
  expect_failure(3, "--optimizer adam --hidden 12 --resume-from-shards 4",
                 "parameter 0 has 128 elements in the checkpoint, 96 here (a checkpoint of "
                 "another model)");
  launch(3, "--stage 1 --optimizer adam --steps 2 --consolidate " + path("whole"));
  expect_failure(2, "--optimizer sgd --resume-unsharded " + path("whole"),
                 "'" + path("whole") + "' has no entry 'optim/param.0.momentum' (a checkpoint of " +
                     "another model or optimizer?)");
  fs::rename(path("c") + ".shard3-of-4", path("moved"));
  expect_failure(2, "--optimizer adam --resume-from-shards 4",
                 "IoError: sharded checkpoint load failed on rank 0 of the global process set: "
                 "sharded checkpoint: shard file '" +
                     path("c") + ".shard3-of-4' of the 4-shard checkpoint '" + path("c") +
                     "' does not exist");
  for (int r = 0; r < 3; ++r)
    EXPECT_TRUE(fs::exists(path("c") + ".shard" + std::to_string(r) + "-of-4"));
}

}  // namespace
