// Data-parallel training through real processes (kolorun, TCP backend): P ranks with uneven
// local batches give the parameters of 1 rank, communication progresses during backward,
// broadcast makes replicas identical, and a checkpoint resumes exactly. The checkpoint error
// paths fail on every rank (no hang, nothing half-written or half-loaded) and the job goes on.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/run_command.h"

namespace {

namespace fs = std::filesystem;

// The line that rank `rank` printed starting with `what` (without the prefix), or "".
std::string line_of(const std::string& output, int rank, const std::string& what) {
  const std::string start = "[" + std::to_string(rank) + "] " + what;
  std::istringstream lines(output);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind(start, 0) == 0) return line;
  }
  return "";
}

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
  // `env`: "NAME=value ..." set for kolorun and so for every rank.
  std::string launch(int np, const std::string& args, const std::string& env = "") {
    kolo::testing::ProcessRun r = run(np, args, env);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return r.output;
  }
  kolo::testing::ProcessRun run(int np, const std::string& args, const std::string& env = "") {
    return kolo::testing::run_command(env + " " + KOLORUN_PATH + " -np " + std::to_string(np) +
                                          " " + TRAINING_WORKER_PATH + " " + args,
                                      /*timeout_s=*/120);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // Runs the worker's ckpt-failure scenario (see training_worker.cc) and checks what every
  // rank must print: its error, then that its state was untouched and the round trip worked.
  // Rank r > 0's error carries rank 0's: "<Code>: checkpoint '<ckpt>' could not be <verb> on
  // root rank 0: <rank 0's message>". Returns rank 0's error line without its prefix.
  std::string launch_failure(int np, const std::string& fail, const std::string& ckpt,
                             const std::string& verb) {
    const std::string output = launch(np, "--mode ckpt-failure --fail " + fail + " --ckpt " + ckpt +
                                              " --good " + path("good.kolo"));
    for (int r = 0; r < np; ++r) {
      const std::string tag = "[" + std::to_string(r) + "] ";
      EXPECT_EQ(kolo::testing::count_occurrences(output, tag + fail + " failed: "), 1)
          << "rank " << r << "\n"
          << output;
      EXPECT_EQ(kolo::testing::count_occurrences(output, tag + "state unchanged"), 1) << output;
      EXPECT_EQ(kolo::testing::count_occurrences(output, tag + "round trip ok"), 1) << output;
    }
    const std::string root = line_of(output, 0, fail + " failed: ");
    const std::string code_prefix = "[0] " + fail + " failed: IoError: ";
    EXPECT_EQ(root.rfind(code_prefix, 0), 0u) << output;
    const std::string root_message = root.substr(std::min(root.size(), code_prefix.size()));
    for (int r = 1; r < np; ++r) {
      EXPECT_EQ(line_of(output, r, fail + " failed: "),
                "[" + std::to_string(r) + "] " + fail + " failed: IoError: checkpoint '" + ckpt +
                    "' could not be " + verb + " on root rank 0: " + root_message)
          << output;
    }
    return root_message;
  }

  fs::path dir_;
};

bool contains(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

// Paths in `dir` whose name holds a temporary checkpoint's marker (".tmp-").
std::vector<std::string> temporary_files(const fs::path& dir) {
  std::vector<std::string> found;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    if (contains(entry.path().filename().string(), ".tmp-")) found.push_back(entry.path().string());
  }
  return found;
}

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
  // The default puts all four gradients in one grouped bucket; one allreduce per gradient
  // and two buckets (fc2's weight and bias with fc1's bias, 336 bytes, then fc1's weight)
  // reduce the same.
  launch(2, "--steps 5 --bucket-bytes 0 --out " + path("p2-per-gradient"));
  launch(3, "--steps 5 --bucket-bytes 600 --out " + path("p3-two-buckets"));
  expect_close(read_params(path("p2-per-gradient")), one, kTolerance);
  expect_close(read_params(path("p3-two-buckets")), one, kTolerance);
}

TEST_F(TrainingTest, GradientAccumulationOverTwoPassesMatchesOnePass) {
  launch(1, "--steps 4 --out " + path("single"));
  launch(2, "--steps 4 --passes 2 --out " + path("accumulated"));
  expect_close(read_params(path("accumulated")), read_params(path("single")), kTolerance);
}

// Issue 17: k passes under no_sync() plus one synced pass on P ranks (uneven shares) equal one
// rank running the same k+1 passes on the whole batch; the worker checks that nothing was
// submitted inside the scope.
TEST_F(TrainingTest, NoSyncPassesThenOneSyncedPassMatchOneRankOnTheUnion) {
  launch(1, "--mode nosync --steps 4 --passes 2 --out " + path("one"));
  launch(2, "--mode nosync --steps 4 --passes 2 --out " + path("two"));
  launch(4, "--mode nosync --steps 4 --passes 2 --out " + path("four"));
  launch(1, "--mode nosync --steps 4 --passes 4 --out " + path("one-k3"));
  launch(2, "--mode nosync --steps 4 --passes 4 --out " + path("two-k3"));
  const Params one = read_params(path("one"));
  expect_close(read_params(path("two")), one, kTolerance);
  expect_close(read_params(path("four")), one, kTolerance);
  expect_close(read_params(path("two-k3")), read_params(path("one-k3")), kTolerance);
  // As DDP's, no_sync sums the passes' gradients (backward_passes_per_step averages them), so
  // the result differs from training on the mean gradient.
  const Params mean_run = [&] {
    launch(1, "--steps 4 --out " + path("mean"));
    return read_params(path("mean"));
  }();
  EXPECT_NE(mean_run.at("fc2.bias"), one.at("fc2.bias"));
}

// The same helpers on a process set without rank 0 (ranks 1, 2): rank 1 is the set's rank 0,
// rank 2 (set rank 1) the root of the work, rank 0 prints nothing.
TEST_F(TrainingTest, RankZeroHelpersWorkOnAProcessSet) {
  const std::string out = launch(3, "--mode rank-zero-set --out " + path("set-ready"));
  EXPECT_EQ(kolo::testing::count_occurrences(out, "set root only"), 1) << out;
  EXPECT_EQ(line_of(out, 1, "set root only"), "[1] set root only") << out;
  EXPECT_EQ(kolo::testing::count_occurrences(out, "set member"), 2) << out;
  for (int r = 1; r < 3; ++r) {
    const std::string tag = "[" + std::to_string(r) + "] ";
    EXPECT_EQ(line_of(out, r, "[rank"), tag + "[rank " + std::to_string(r) + "] set member") << out;
    EXPECT_EQ(line_of(out, r, "set file seen"), tag + "set file seen") << out;
  }
  EXPECT_EQ(line_of(out, 2, "set fail:"), "[2] set fail: IoError: disk full") << out;
  EXPECT_EQ(line_of(out, 1, "set fail:"),
            "[1] set fail: IoError: 'set.fail' failed on root rank 1 of process set 1 (ranks 1, "
            "2): disk full")
      << out;
  EXPECT_EQ(line_of(out, 0, "set"), "") << out;
}

// Issue 17: rank-0 logging and "rank 0 does it, the others wait" with its failure on every rank.
TEST_F(TrainingTest, RankZeroHelpersLogOnceAndShareTheRootsOutcome) {
  const std::string out = launch(3, "--mode rank-zero --out " + path("ready"));
  EXPECT_EQ(kolo::testing::count_occurrences(out, "root only: 3 rank(s)"), 1) << out;
  EXPECT_EQ(line_of(out, 0, "root only"), "[0] root only: 3 rank(s)") << out;
  for (int r = 0; r < 3; ++r) {
    const std::string tag = "[" + std::to_string(r) + "] ";
    const std::string me = "[rank " + std::to_string(r) + "] ";
    EXPECT_EQ(kolo::testing::count_occurrences(out, tag + me + "every rank\n"), 1) << out;
    EXPECT_EQ(kolo::testing::count_occurrences(out, tag + me + "second line\n"), 1) << out;
    EXPECT_EQ(kolo::testing::count_occurrences(out, tag + "file seen"), 1) << out;
  }
  EXPECT_EQ(line_of(out, 0, "fail:"), "[0] fail: IoError: disk full") << out;
  EXPECT_EQ(line_of(out, 0, "throw:"), "[0] throw: IoError: 'throw': boom") << out;
  for (int r = 1; r < 3; ++r) {
    const std::string tag = "[" + std::to_string(r) + "] ";
    EXPECT_EQ(line_of(out, r, "fail:"),
              tag + "fail: IoError: 'fail' failed on root rank 0: disk full")
        << out;
    EXPECT_EQ(line_of(out, r, "throw:"),
              tag + "throw: IoError: 'throw' failed on root rank 0: 'throw': boom")
        << out;
  }
}

TEST_F(TrainingTest, AllreducesCompleteWhileBackwardStillRuns) {
  // One allreduce per gradient, then fc2's weight and bias as one grouped bucket (272 bytes).
  for (const char* buckets : {"0", "272"}) {
    const std::string output =
        launch(2, std::string("--mode overlap --steps 3 --bucket-bytes ") + buckets);
    EXPECT_NE(output.find("[0] overlap ok: 3 steps"), std::string::npos) << output;
    EXPECT_NE(output.find("[1] overlap ok: 3 steps"), std::string::npos) << output;
  }
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

// The root cannot create the file (its directory does not exist): the root's error names the
// path and the OS reason; the others learn it through the root's broadcast instead of waiting.
// Nothing appears at the path.
TEST_F(TrainingTest, SaveOnRootFailsOnEveryRankWhenTheDirectoryIsMissing) {
  for (int np : {2, 3}) {
    const std::string ckpt = path("no_such_dir_" + std::to_string(np)) + "/ckpt.kolo";
    const std::string root = launch_failure(np, "save", ckpt, "written");
    EXPECT_EQ(root.rfind("save_tensors: cannot create temporary file '" + ckpt + ".tmp-", 0), 0u)
        << root;
    EXPECT_TRUE(contains(root, "': No such file or directory")) << root;
    EXPECT_FALSE(fs::exists(ckpt));
    EXPECT_FALSE(fs::exists(fs::path(ckpt).parent_path()));
  }
}

// The parent of the path is a regular file (root ignores permissions, this does not).
TEST_F(TrainingTest, SaveOnRootFailsOnEveryRankWhenTheParentIsAFile) {
  const std::string parent = path("plain_file");
  std::ofstream(parent) << "not a directory\n";
  const std::string ckpt = parent + "/ckpt.kolo";
  const std::string root = launch_failure(2, "save", ckpt, "written");
  EXPECT_EQ(root.rfind("save_tensors: cannot create temporary file '" + ckpt + ".tmp-", 0), 0u)
      << root;
  EXPECT_TRUE(contains(root, "': Not a directory")) << root;
  EXPECT_TRUE(fs::is_regular_file(parent));
}

// The root writes the whole temporary file, then the rename onto the path fails (the path is
// a directory): the temporary file is removed and the directory is left as it was.
TEST_F(TrainingTest, SaveOnRootFailsOnEveryRankWhenTheRenameFails) {
  const std::string ckpt = path("ckpt_is_a_dir");
  fs::create_directory(ckpt);
  const std::string root = launch_failure(3, "save", ckpt, "written");
  EXPECT_EQ(root.rfind("save_tensors: cannot rename '" + ckpt + ".tmp-", 0), 0u) << root;
  EXPECT_TRUE(contains(root, "' to '" + ckpt + "': Is a directory")) << root;
  EXPECT_TRUE(fs::is_directory(ckpt));
  EXPECT_TRUE(fs::is_empty(ckpt));
  EXPECT_EQ(temporary_files(dir_), std::vector<std::string>{});
}

// Only the root reads; when the file is missing every rank fails naming it, and no rank's
// model or optimizer state changes (checked bit for bit in the worker). 1 rank: the same
// error, no peers to tell.
TEST_F(TrainingTest, LoadFromRootOfAMissingFileFailsOnEveryRankAndChangesNothing) {
  for (int np : {1, 2, 3}) {
    const std::string ckpt = path("missing_" + std::to_string(np) + ".kolo");
    EXPECT_EQ(launch_failure(np, "missing", ckpt, "loaded"),
              "load_tensors: cannot open '" + ckpt + "': No such file or directory");
  }
}

// A flipped payload byte passes the structural checks and is caught by the CRC on the root;
// nothing of the damaged file reaches any rank's state.
TEST_F(TrainingTest, LoadFromRootOfACorruptFileFailsOnEveryRankAndChangesNothing) {
  for (int np : {2, 3}) {
    const std::string ckpt = path("corrupt_" + std::to_string(np) + ".kolo");
    const std::string root = launch_failure(np, "corrupt", ckpt, "loaded");
    EXPECT_EQ(root.rfind("checkpoint '" + ckpt + "': checksum mismatch (stored 0x", 0), 0u) << root;
    EXPECT_TRUE(contains(root, "): the file is truncated or corrupt")) << root;
  }
}

}  // namespace

namespace {

// Autotuning (issue 11) with a configuration change every few steps: one scored step per
// configuration, and grids shrunk to this model's gradients (16 to 512 bytes, 848 in all) so
// that every size but the default 4 MiB splits them.
const std::string kTuneEnv =
    "KOLO_AUTOTUNE=1 KOLO_AUTOTUNE_SAMPLES=1 KOLO_AUTOTUNE_BUCKET_FROM=64 "
    "KOLO_AUTOTUNE_BUCKET_TO=512 KOLO_AUTOTUNE_FUSION_FROM=64 KOLO_AUTOTUNE_FUSION_TO=512";

// Rank r's line starting with `what`, without the "[r] " prefix.
std::string rank_line(const std::string& output, int rank, const std::string& what) {
  const std::string line = line_of(output, rank, what);
  return line.substr(std::min(line.size(), std::to_string(rank).size() + 3));
}

std::vector<std::string> words(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST_F(TrainingTest, AutotuneChangesConfigurationsAtTheSameStepOnEveryRankAndResultsStayExact) {
  // The cycle time is fixed (a user-set knob) so that the search reaches the bucket size
  // within a few configurations.
  constexpr int kSteps = 40;
  launch(1, "--steps " + std::to_string(kSteps) + " --out " + path("p1"));
  const Params one = read_params(path("p1"));
  for (int np : {2, 3}) {
    SCOPED_TRACE(std::to_string(np) + " ranks");
    const std::string csv = path("tune" + std::to_string(np) + ".csv");
    const std::string trace = path("trace" + std::to_string(np) + ".json");
    const std::string out = path("p" + std::to_string(np));
    const std::string output = launch(
        np, "--steps " + std::to_string(kSteps) + " --out " + out,
        kTuneEnv + " KOLO_CYCLE_TIME=1ms KOLO_AUTOTUNE_LOG=" + csv + " KOLO_TIMELINE=" + trace);
    // Every rank applied the same configurations in the same cycles from the same steps, and
    // so had the same buckets at every step.
    const std::string history = rank_line(output, 0, "autotune history:");
    const std::string buckets = rank_line(output, 0, "buckets per step:");
    for (int r = 1; r < np; ++r) {
      EXPECT_EQ(rank_line(output, r, "autotune history:"), history) << output;
      EXPECT_EQ(rank_line(output, r, "buckets per step:"), buckets) << output;
    }
    const std::vector<std::string> applied = words(history);
    ASSERT_GE(applied.size(), 6u) << output;  // "autotune", "history:", then >= 4 changes
    std::vector<std::string> counts = words(buckets);
    ASSERT_EQ(counts.size(), static_cast<size_t>(kSteps) + 3)
        << output;  // after "buckets per step:"
    counts.erase(counts.begin(), counts.begin() + 3);
    EXPECT_GE(std::set<std::string>(counts.begin(), counts.end()).size(), 2u)
        << "the bucket layout never changed: " << buckets;
    // Bucket and fusion changes regroup the same sums: the parameters are 1 rank's.
    expect_close(read_params(out), one, 1e-4);

    // The CSV has its header and a row per measured configuration from the first on: the
    // default (4 MiB, 1 ms, 4 MiB, flat: one host has no hierarchy to try) at ratio 1.
    std::istringstream rows(read_file(csv));
    std::string header, first;
    std::getline(rows, header);
    EXPECT_EQ(header,
              "step,fusion_threshold_bytes,cycle_time_us,bucket_bytes,hierarchical_allreduce,"
              "step_time_ms,steps,ratio_to_default,best_so_far,phase");
    ASSERT_TRUE(std::getline(rows, first));
    std::vector<std::string> f;
    std::stringstream fields(first);
    for (std::string x; std::getline(fields, x, ',');) f.push_back(x);
    ASSERT_EQ(f.size(), 10u) << first;
    EXPECT_EQ(f[1], "4194304");
    EXPECT_EQ(f[2], "1000.000");
    EXPECT_EQ(f[3], "4194304");
    EXPECT_EQ(f[4], "0");
    EXPECT_GT(std::stod(f[5]), 0.0);
    EXPECT_EQ(f[6], "2");  // one warm-up step, one scored
    EXPECT_EQ(f[7], "1.0000");
    EXPECT_EQ(f[8], "1");
    EXPECT_EQ(f[9], "search");
    int more = 0;
    for (std::string row; std::getline(rows, row);) ++more;
    EXPECT_GE(more, 2);

    // The timeline has a counter sample per applied configuration (every rank) and the
    // scores (rank 0 only).
    for (int r = 0; r < np; ++r) {
      const std::string text =
          read_file(path("trace" + std::to_string(np) + ".rank" + std::to_string(r) + ".json"));
      // The history was printed after the last step; the decision that last step's time
      // caused may still have been applied (and recorded) before shutdown.
      const int counters =
          kolo::testing::count_occurrences(text, "{\"name\":\"autotune\",\"ph\":\"C\"");
      const int printed = static_cast<int>(applied.size()) - 2;
      EXPECT_TRUE(counters == printed || counters == printed + 1)
          << "rank " << r << ": " << counters << " counters, " << printed << " in the history";
      EXPECT_EQ(
          kolo::testing::count_occurrences(text, "\"name\":\"autotune score\",\"ph\":\"C\"") > 0,
          r == 0);
    }
  }
}

TEST_F(TrainingTest, AutotuneNeverChangesAKnobTheUserSet) {
  const std::string output =
      launch(2, "--steps 16", kTuneEnv + " KOLO_FUSION_THRESHOLD=128 KOLO_CYCLE_TIME=2ms");
  const std::vector<std::string> applied = words(rank_line(output, 0, "autotune history:"));
  ASSERT_GE(applied.size(), 3u) << output;
  for (size_t i = 2; i < applied.size(); ++i) {
    // cycle/from_step/threshold/cycle_ns/bucket
    std::vector<std::string> f;
    std::stringstream fields(applied[i]);
    for (std::string x; std::getline(fields, x, '/');) f.push_back(x);
    ASSERT_EQ(f.size(), 5u) << applied[i];
    EXPECT_EQ(f[2], "128") << applied[i];
    EXPECT_EQ(f[3], "2000000") << applied[i];
  }
}

TEST_F(TrainingTest, AutotuneBadInputFailsAtInitNamingTheVariable) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"KOLO_AUTOTUNE=maybe", "KOLO_AUTOTUNE=maybe is invalid"},
      {"KOLO_AUTOTUNE=1 KOLO_AUTOTUNE_LOG=" + path("missing/dir/tune.csv"),
       "KOLO_AUTOTUNE_LOG=" + path("missing/dir/tune.csv") + ": cannot open for writing"},
      {"KOLO_AUTOTUNE=1 KOLO_AUTOTUNE_BUCKET_FROM=8MiB KOLO_AUTOTUNE_BUCKET_TO=1MiB",
       "KOLO_AUTOTUNE_BUCKET_FROM=8MiB exceeds KOLO_AUTOTUNE_BUCKET_TO=1MiB"},
      // Fewer steps than the default and the confirmation take.
      {"KOLO_AUTOTUNE=1 KOLO_AUTOTUNE_STEPS=10",
       "KOLO_AUTOTUNE_STEPS=10 is invalid: expected an integer in [30, 1000000]"}};
  for (const auto& [env, error] : cases) {
    kolo::testing::ProcessRun r = run(2, "--steps 2", env);
    EXPECT_NE(r.exit_code, 0) << env;
    EXPECT_NE(r.exit_code, 124) << env;  // not a hang
    EXPECT_TRUE(contains(r.output, error)) << env << "\n" << r.output;
  }
}
