// The PyTorch plugin against the real PyTorch, in real processes under kolorun (TCP backend):
// the C++ worker (torch_worker.cc) and the Python module (torch_test.py, the examples and a
// script written against horovod.torch's API). Each run must end with "[ok] <mode>" on every
// rank; the workers check values, this driver checks that every rank got there.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "tests/support/run_command.h"

namespace {

using kolo::testing::count_occurrences;

std::string run_ok(int np, const std::string& program, const std::string& mode,
                   const std::string& env = "") {
  const kolo::testing::ProcessRun r = kolo::testing::run_command(
      env + " OMP_NUM_THREADS=1 " + KOLORUN_PATH + " -np " + std::to_string(np) + " " + program,
      /*timeout_s=*/150);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (int rank = 0; rank < np; ++rank) {
    EXPECT_EQ(count_occurrences(r.output, "[" + std::to_string(rank) + "] [ok] " + mode), 1)
        << "rank " << rank << "\n"
        << r.output;
  }
  EXPECT_EQ(count_occurrences(r.output, "FAIL"), 0) << r.output;
  return r.output;
}

std::string worker(const std::string& args) { return std::string(TORCH_WORKER_PATH) + " " + args; }

TEST(TorchCpp, UnevenBatchesEqualOneProcessTwoRanks) { run_ok(2, worker("exact"), "exact"); }
TEST(TorchCpp, UnevenBatchesEqualOneProcessThreeRanks) { run_ok(3, worker("exact"), "exact"); }
TEST(TorchCpp, BackwardPassesPerStepAndCompression) {
  run_ok(2, worker("exact --passes 2 --compression fp16"), "exact");
}
TEST(TorchCpp, CommunicationStartsDuringBackward) {
  const std::string out = run_ok(2, worker("overlap"), "overlap");
  EXPECT_EQ(count_occurrences(out, "first_completed_during_backward 1"), 2) << out;
}
TEST(TorchCpp, EveryCollectiveAndDtypeMatchesClosedForms) {
  const std::string out = run_ok(3, worker("collectives"), "collectives");
  // Unsupported dtypes are refused with the tensor's name and the dtype, on every rank.
  EXPECT_EQ(count_occurrences(out, "refused: InvalidArgument: tensor 'flags' has dtype Bool"), 3)
      << out;
}
TEST(TorchCpp, SyncBatchNormEqualsBatchNormOnTheUnion) {
  run_ok(2, worker("syncbn"), "syncbn");
  run_ok(3, worker("syncbn"), "syncbn");
}
TEST(TorchCpp, ShapeMismatchRaisesOnEveryRankWithTheTensorName) {
  const std::string out = run_ok(2, worker("mismatch"), "mismatch");
  for (int rank = 0; rank < 2; ++rank) {
    const std::string tag = "[" + std::to_string(rank) + "] error: Mismatch: ";
    EXPECT_EQ(count_occurrences(out, tag), 1) << out;
  }
  EXPECT_GE(count_occurrences(out, "layer3.weight.grad"), 2) << out;
}

// The examples train (a few steps; the data set is Debian's dataset-fashion-mnist).
void expect_example_runs(const std::string& program) {
  const kolo::testing::ProcessRun r =
      kolo::testing::run_command(std::string("OMP_NUM_THREADS=1 ") + KOLORUN_PATH + " -np 2 " +
                                     program + " --max-steps 20 --test-subset 500",
                                 /*timeout_s=*/150);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "[0] epoch 0: train loss "), 1) << r.output;
}

#ifdef TORCH_EXAMPLE_CPP
// ZeRO in C++ (kolo/torch_zero.h): sharded equals unsharded, 2 and 3 ranks, uneven batches.
TEST(TorchCpp, ZeroShardedEqualsUnshardedTwoRanks) { run_ok(2, worker("zero"), "zero"); }
TEST(TorchCpp, ZeroShardedEqualsUnshardedThreeRanks) { run_ok(3, worker("zero"), "zero"); }
TEST(TorchCpp, ExampleTrains) { expect_example_runs(TORCH_EXAMPLE_CPP); }
#endif

#if TORCH_HAVE_PYTHON
std::string python(const std::string& script, const std::string& args) {
  return "env PYTHONPATH=" + std::string(TORCH_PYTHONPATH) + " " + TORCH_PYTHON + " " + script +
         " " + args;
}
std::string test_script(const std::string& args) {
  return python(std::string(TORCH_SCRIPTS) + "/torch_test.py", args);
}

// One 2-rank job runs four modes (each launch imports torch, seconds per rank).
TEST(TorchPython, UnevenBatchesGlooCollectivesOverlapAndMismatchTwoRanks) {
  const std::string out = run_ok(2, test_script("exact,gloo,overlap,mismatch"), "exact");
  for (const char* mode : {"gloo", "overlap", "mismatch"}) {
    for (int rank = 0; rank < 2; ++rank) {
      EXPECT_EQ(count_occurrences(out, "[" + std::to_string(rank) + "] [ok] " + mode), 1)
          << mode << " on rank " << rank << "\n"
          << out;
    }
  }
  // The shape mismatch raised KoloError on every rank, naming the tensor.
  EXPECT_EQ(count_occurrences(out, "error: KoloError Mismatch: allreduce 'layer3.weight.grad'"), 2)
      << out;
}
// Three ranks: the exact mode, then a process set of ranks 1 and 2.
TEST(TorchPython, UnevenBatchesAndProcessSetThreeRanks) {
  const std::string out = run_ok(3, test_script("exact,process_set"), "exact");
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_EQ(count_occurrences(out, "[" + std::to_string(rank) + "] [ok] process_set"), 1)
        << "rank " << rank << "\n"
        << out;
  }
}
TEST(TorchPython, ExampleTrains) {
  expect_example_runs(python(std::string(TORCH_EXAMPLES) + "/torch_python/train.py", ""));
}
TEST(TorchPython, HorovodStyleScriptTrains) {
  run_ok(2, python(std::string(TORCH_SCRIPTS) + "/horovod_style.py", ""), "horovod_style");
}
// What Horovod's own test suite asks of horovod.torch (horovod_compat_test.py; docs/torch.md):
// the build queries, Horovod's gradients of every collective, the grouped and object calls,
// ValueError for bad alltoall arguments, a process set's global root, the optimizer's fixes.
TEST(TorchPython, HorovodCompatibilityTwoRanks) {
  const std::string out =
      run_ok(2, python(std::string(TORCH_SCRIPTS) + "/horovod_compat_test.py", ""), "build");
  for (const char* part : {"grads", "calls", "errors", "optimizer"}) {
    for (int rank = 0; rank < 2; ++rank) {
      EXPECT_EQ(count_occurrences(out, "[" + std::to_string(rank) + "] [ok] " + part), 1)
          << part << " on rank " << rank << "\n"
          << out;
    }
  }
}
// kolo.torch.elastic on a fixed job: the sampler's unit checks (simulated worlds), TorchState's
// commit, restore and sync, run() calling the function once.
TEST(TorchPython, ElasticSamplerAndTorchStateTwoRanks) {
  const std::string out = run_ok(2, test_script("sampler,state"), "sampler");
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(count_occurrences(out, "[" + std::to_string(rank) + "] [ok] state"), 1)
        << "rank " << rank << "\n"
        << out;
  }
}
std::string elastic_script(const std::string& args) {
  return python(std::string(TORCH_SCRIPTS) + "/elastic_script.py", args);
}
// A Horovod elastic script on a fixed job: 144 samples, 2 ranks of 6 a step: 12 steps an epoch.
TEST(TorchPython, ElasticScriptTrainsOnAFixedJob) {
  run_ok(2, elastic_script("--epochs 2 --expect-steps 24"),
         "elastic_script size 2 steps 24 resets 0 epoch 1");
}

// Whether this build's kolorun runs elastic jobs (its elastic driver lands separately).
bool kolorun_is_elastic() {
  const kolo::testing::ProcessRun r =
      kolo::testing::run_command(std::string(KOLORUN_PATH) + " --help", /*timeout_s=*/30);
  // An option's line, not a mention in another's help.
  return r.output.find("\n  --min-np") != std::string::npos;
}
// The real thing: 3 ranks, --min-np 2, a commit every 2 steps; rank 1 kills itself (SIGKILL) in
// step 3 once the step has updated the model. The survivors' step fails at its next collective
// (HorovodInternalError) with steps 2 and 3 applied but uncommitted; they restore the commit
// made after step 1, re-form a world of 2, sync and finish: 2 steps of 3 ranks (36 samples), the
// epoch's other 108 samples in 9 steps of 2 ranks, 12 steps of epoch 1: 23 committed steps. The
// script checks that the committed history used every sample once per epoch and that one
// process replaying it ends with the same model (without the restore it differs by ~0.02).
// Process sets: one of ranks 0 and 2 works afterwards as ranks 0 and 1 (its ProcessSet object
// renumbered), one of ranks 1 and 2 fails naming itself and the lost worker.
TEST(TorchPython, ElasticScriptLosesARankAndFinishes) {
  if (!kolorun_is_elastic()) GTEST_SKIP() << "this kolorun has no --min-np";
  const kolo::testing::ProcessRun r = kolo::testing::run_command(
      std::string("OMP_NUM_THREADS=1 ") + KOLORUN_PATH + " -np 3 --min-np 2 " +
          elastic_script("--process-sets --batches-per-commit 2 --kill-rank 1 --kill-step 3 "
                         "--kill-after-update --expect-steps 23 --expect-resets 1"),
      /*timeout_s=*/150);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "killing myself at step 3"), 1) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "[ok] elastic_script size 2 steps 23 resets 1 epoch 1"), 2)
      << r.output;
  EXPECT_EQ(count_occurrences(r.output,
                              "lost set: PreconditionFailed: allreduce "
                              "'check.lost_set': process set 2 lost its member worker 1 "
                              "(rank 1) when the world was re-formed as generation 1"),
            1)
      << r.output;
  EXPECT_EQ(count_occurrences(r.output, "FAIL"), 0) << r.output;
}
// Too few left: the survivor's re-form ends with kolorun's message, which run() raises.
TEST(TorchPython, ElasticScriptEndsBelowMinNp) {
  if (!kolorun_is_elastic()) GTEST_SKIP() << "this kolorun has no --min-np";
  const kolo::testing::ProcessRun r = kolo::testing::run_command(
      std::string("OMP_NUM_THREADS=1 ") + KOLORUN_PATH + " -np 2 --min-np 2 " +
          elastic_script("--kill-rank 1 --kill-step 3"),
      /*timeout_s=*/150);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(count_occurrences(r.output,
                              "[0] [kolo.torch.elastic] re-forming the world (1 of at "
                              "most 100) after: HorovodInternalError: PeerFailure: "),
            1)
      << r.output;
  EXPECT_EQ(count_occurrences(r.output,
                              "KoloError: Aborted: kolorun: 1 rank left, fewer than "
                              "--min-np 2: lost worker 1 (rank 1 of generation 0"),
            1)
      << r.output;
  EXPECT_EQ(count_occurrences(r.output, "[ok]"), 0) << r.output;
}
// Growth without a failure: a host discovery script reports a third slot once rank 0 has made
// 3 steps; kolorun starts a worker, the two ranks meet HostsUpdatedInterrupt at a commit (no
// restore, no HorovodInternalError), re-form with it and the world of 3 finishes.
TEST(TorchPython, ElasticScriptGrowsWhenASlotIsDiscovered) {
  if (!kolorun_is_elastic()) GTEST_SKIP() << "this kolorun has no --min-np";
  std::string dir = (std::filesystem::temp_directory_path() / "kolo_torch_grow_XXXXXX").string();
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  const std::string flag = dir + "/grow", script = dir + "/discover.sh";
  std::ofstream(script) << "#!/bin/sh\nif [ -e " << flag
                        << " ]; then echo localhost:3; else echo localhost:2; fi\n";
  std::filesystem::permissions(script, std::filesystem::perms::owner_all);
  const kolo::testing::ProcessRun r = kolo::testing::run_command(
      std::string("OMP_NUM_THREADS=1 ") + KOLORUN_PATH +
          " -np 2 --min-np 2 --max-np 3 --discovery-interval 200ms --host-discovery-script " +
          script + " " +
          elastic_script("--epochs 4 --grow-file " + flag +
                         " --grow-at-step 3 --step-sleep 0.3 --expect-resets 1 --expect-size 3"),
      /*timeout_s=*/150);
  std::filesystem::remove_all(dir);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "[ok] elastic_script size 3 "), 3) << r.output;
  EXPECT_EQ(count_occurrences(r.output,
                              "re-forming the world (1 of at most 100) after: "
                              "HostsUpdatedInterrupt: WorldChanged: "),
            2)
      << r.output;
  EXPECT_EQ(count_occurrences(r.output, "HorovodInternalError"), 0) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "FAIL"), 0) << r.output;
}
// The same loss with --respawn: kolorun starts a replacement, which joins a world of 3 at the
// survivors' next commit (HostsUpdatedInterrupt there), syncs from them with no commit of its own
// and runs its reset callback once (the survivors twice). When it joins depends on the machine
// (importing torch takes seconds), hence a sleep per step while the world is smaller than 3 (up
// to 44 steps, 13 s, for the replacement to join) and no count of steps; every sample is still
// used once per epoch, whatever steps the world changed at.
TEST(TorchPython, ElasticScriptReplacesALostRank) {
  if (!kolorun_is_elastic()) GTEST_SKIP() << "this kolorun has no --min-np";
  const kolo::testing::ProcessRun r = kolo::testing::run_command(
      std::string("OMP_NUM_THREADS=1 ") + KOLORUN_PATH + " -np 3 --min-np 2 --respawn " +
          elastic_script("--epochs 4 --kill-rank 1 --kill-step 3 --step-sleep 0.3 "
                         "--expect-resets -1 --expect-size 3"),
      /*timeout_s=*/150);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "killing myself at step 3"), 1) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "[ok] elastic_script size 3 "), 3) << r.output;
  EXPECT_EQ(count_occurrences(r.output, " resets 2 epoch 3"), 2) << r.output;
  EXPECT_EQ(count_occurrences(r.output, " resets 1 epoch 3"), 1) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "FAIL"), 0) << r.output;
}
// ZeRO through kolo.torch (zero_test.py; docs/zero-torch.md): 2, 3 and 4 ranks with uneven
// batches, every mode in one job: SGD, Adam and AdamW sharded equal the unsharded run, the
// state is split across the ranks, consolidate/load round trips, bad input is refused.
void run_zero(int np) {
  const std::string out =
      run_ok(np, python(std::string(TORCH_SCRIPTS) + "/zero_test.py", "equal,state,bad"), "equal");
  for (const char* mode : {"state", "bad"}) {
    for (int rank = 0; rank < np; ++rank) {
      EXPECT_EQ(count_occurrences(out, "[" + std::to_string(rank) + "] [ok] " + mode), 1)
          << mode << " on rank " << rank << "\n"
          << out;
    }
  }
  EXPECT_EQ(count_occurrences(out, "max parameter difference 0 "), np) << out;
}
TEST(TorchPython, ZeroShardedEqualsUnshardedTwoRanks) { run_zero(2); }
TEST(TorchPython, ZeroShardedEqualsUnshardedThreeRanks) { run_zero(3); }
TEST(TorchPython, ZeroShardedEqualsUnshardedFourRanks) { run_zero(4); }
#endif

}  // namespace
