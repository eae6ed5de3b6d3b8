// Elastic training through kolorun --min-np on real processes (tcp and shm): ranks killed,
// exiting, lost while the world re-forms, replaced and added, and too few left. The worker
// (elastic_train_worker.cc) adds exactly 1.0 per step to its weights, so "weights 40.0" after 40
// steps says that no step was lost or done twice across the changes of the world.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdio>
#include <string>

#include "tests/support/run_command.h"

namespace {

using kolo::testing::count_occurrences;
using kolo::testing::run_command;

std::string job(const std::string& backend, const std::string& kolorun_flags,
                const std::string& worker_flags) {
  return "KOLO_CPU_OPERATIONS=" + backend + " " + KOLO_TEST_KOLORUN + " " + kolorun_flags + " " +
         KOLO_TEST_WORKER + " " + worker_flags;
}

// "done steps 40 weights 40.0 generation 1 size 3 resets 1": how a rank ended.
std::string done(int steps, int generation, int size, int resets) {
  return "done steps " + std::to_string(steps) + " weights " + std::to_string(steps) +
         ".0 generation " + std::to_string(generation) + " size " + std::to_string(size) +
         " resets " + std::to_string(resets) + "\n";
}

class ElasticRecovery : public ::testing::TestWithParam<const char*> {};

TEST_P(ElasticRecovery, SurvivorsOfAKilledRankFinishEveryStepExactlyOnce) {
  auto r = run_command(
      job(GetParam(), "-np 4 --min-np 2", "--steps 40 --commit-every 5 --step-ms 5 --die 2:12:0"),
      90);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "kolorun: generation 1: 3 ranks, workers 0, 1, 3\n"), 1)
      << r.output;
  // Killed at step 12, the survivors resume from the commit after step 10.
  EXPECT_EQ(count_occurrences(r.output, "step 10 generation 1 size 3 at "), 3) << r.output;
  EXPECT_EQ(count_occurrences(r.output, done(40, 1, 3, 1)), 3) << r.output;
}

TEST_P(ElasticRecovery, ARespawnedRankTakesTheLostOnesPlace) {
  auto r = run_command(job(GetParam(), "-np 3 --min-np 2 --respawn",
                           "--steps 40 --commit-every 5 --step-ms 5 --die 2:12:0"),
                       90);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "starting worker 3 in its place"), 1) << r.output;
  // The replacement joins as the survivors re-form, or at their next commit when it is slower
  // to start: either way at a commit (a multiple of 5 steps), with the state synced.
  const size_t joined = r.output.find("[3] step ");
  ASSERT_NE(joined, std::string::npos) << r.output;
  EXPECT_EQ(std::stoi(r.output.substr(joined + 9)) % 5, 0) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "done steps 40 weights 40.0 generation "), 3) << r.output;
  EXPECT_EQ(count_occurrences(r.output, " size 3 resets "), 3) << r.output;
  EXPECT_EQ(count_occurrences(r.output, " size 3 resets 0\n"), 1) << r.output;  // worker 3
}

TEST_P(ElasticRecovery, TwoFailuresInARowLeaveTwoRanksThatFinish) {
  auto r = run_command(job(GetParam(), "-np 4 --min-np 2",
                           "--steps 40 --commit-every 5 --step-ms 5 --die 2:12:0 --die 3:17:1"),
                       90);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "step 15 generation 2 size 2 at "), 2) << r.output;
  EXPECT_EQ(count_occurrences(r.output, done(40, 2, 2, 2)), 2) << r.output;
}

TEST_P(ElasticRecovery, ARankLostWhileTheWorldReformsIsLeftOutToo) {
  auto r =
      run_command(job(GetParam(), "-np 4 --min-np 2",
                      "--steps 40 --commit-every 5 --step-ms 5 --die 2:12:0:exit --die-in-reset 3"),
                  90);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "kolorun: worker 2 (pid "), 1) << r.output;
  EXPECT_EQ(count_occurrences(r.output, ") exited with status 3"), 1) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "worker 3 dies (kill) in its first reset"), 1) << r.output;
  EXPECT_EQ(count_occurrences(r.output, done(40, 2, 2, 2)), 2) << r.output;
}

TEST_P(ElasticRecovery, ARankAddedWhileAnotherIsLost) {
  // Worker 1 dies in the generation that admits worker 4, the replacement of worker 2 (which
  // starts at step 10 or 15), and worker 5 replaces it in turn.
  auto r = run_command(job(GetParam(), "-np 4 --min-np 2 --respawn",
                           "--steps 40 --commit-every 5 --step-ms 5 --die 2:12:0 --die 1:17:2"),
                       90);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "starting worker 4 in its place"), 1) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "worker 1 dies (kill) at step "), 1) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "starting worker 5 in its place"), 1) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "done steps 40 weights 40.0 generation "), 4) << r.output;
  EXPECT_EQ(count_occurrences(r.output, " size 4 resets "), 4) << r.output;
}

TEST_P(ElasticRecovery, FewerThanMinNpEndsEveryRankWithOneMessage) {
  auto r = run_command(
      job(GetParam(), "-np 3 --min-np 3", "--steps 40 --commit-every 5 --step-ms 5 --die 2:12:0"),
      90);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  const std::string message =
      "kolorun: 2 ranks left, fewer than --min-np 3: lost worker 2 (rank 2 of generation 0, was "
      "killed by signal 9 (SIGKILL)); survivors: worker 0 (rank 0) and worker 1 (rank 1)\n";
  EXPECT_EQ(count_occurrences(r.output, "failed: Aborted: " + message), 2) << r.output;
  EXPECT_EQ(count_occurrences(r.output, message), 3) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "done steps"), 0) << r.output;
}

TEST_P(ElasticRecovery, ASlotFoundByDiscoveryJoinsAtACommit) {
  // The script offers 2 slots the first time and 3 afterwards: the third rank joins at the next
  // commit (steps are multiples of 10) and receives the state by sync().
  const std::string flag = ::testing::TempDir() + "elastic_discovery_" + GetParam();
  const std::string script = ::testing::TempDir() + "elastic_discovery_" + GetParam() + ".sh";
  std::remove(flag.c_str());
  FILE* f = std::fopen(script.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fprintf(
      f, "#!/bin/sh\nif [ -e %s ]; then echo localhost:3; else touch %s; echo localhost:2; fi\n",
      flag.c_str(), flag.c_str());
  std::fclose(f);
  ASSERT_EQ(::chmod(script.c_str(), 0700), 0);
  auto r = run_command(job(GetParam(),
                           "-np 2 --min-np 1 --max-np 3 --discovery-interval 0.1s "
                           "--host-discovery-script " +
                               script,
                           "--steps 200 --commit-every 10 --step-ms 5"),
                       90);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "kolorun: generation 1: 3 ranks, workers 0, 1, 2\n"), 1)
      << r.output;
  EXPECT_EQ(count_occurrences(r.output, "done steps 200 weights 200.0 generation 1 size 3 resets "),
            3)
      << r.output;
  const size_t joined = r.output.find("[2] step ");
  ASSERT_NE(joined, std::string::npos) << r.output;
  const int step = std::stoi(r.output.substr(joined + 9));
  EXPECT_EQ(step % 10, 0) << r.output;
  EXPECT_GT(step, 0) << r.output;
}

TEST_P(ElasticRecovery, AStuckRankIsStoppedAndLeftOut) {
  // Worker 2 hangs in its step (alive, taking no part): rank 0's stall inspector gives up on it
  // after KOLO_STALL_SHUTDOWN_TIME, names it, and kolorun stops it.
  auto r = run_command("KOLO_STALL_CHECK_TIME=0.5s KOLO_STALL_SHUTDOWN_TIME=1s " +
                           job(GetParam(), "-np 4 --min-np 2",
                               "--steps 30 --commit-every 5 --step-ms 5 --die 2:12:0:hang"),
                       90);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "kolorun: stopping worker 2: rank 0 gave up on it"), 1)
      << r.output;
  EXPECT_EQ(count_occurrences(r.output, "done steps 30 weights 30.0 generation "), 3) << r.output;
  EXPECT_EQ(count_occurrences(r.output, " size 3 resets "), 3) << r.output;
}

TEST_P(ElasticRecovery, AProcessSetWhoseMembersAllSurvivedGoesOnRenumbered) {
  // Set {1, 3} of generation 0 is {1, 2} in generation 1 (worker 2 lost).
  auto r = run_command(job(GetParam(), "-np 4 --min-np 2",
                           "--steps 30 --commit-every 5 --step-ms 5 --die 2:12:0 "
                           "--process-set 1,3"),
                       90);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "set 1 size 2 ok\n"), 2) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "set error"), 0) << r.output;
  EXPECT_EQ(count_occurrences(r.output, done(30, 1, 3, 1)), 3) << r.output;
}

TEST_P(ElasticRecovery, AProcessSetThatLostAMemberIsClosedNamingIt) {
  auto r = run_command(job(GetParam(), "-np 4 --min-np 2",
                           "--steps 30 --commit-every 5 --step-ms 5 --die 2:12:0 "
                           "--process-set 1,2,3"),
                       90);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_occurrences(r.output,
                              "set error: PreconditionFailed: allreduce 'setgrad': process set 1 "
                              "lost its member worker 2 (rank 2) when the world was re-formed as "
                              "generation 1; add a new set with kolo::add_process_set()\n"),
            2)
      << r.output;
  EXPECT_EQ(count_occurrences(r.output, done(30, 1, 3, 1)), 3) << r.output;
}

INSTANTIATE_TEST_SUITE_P(Backends, ElasticRecovery, ::testing::Values("tcp", "shm"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
