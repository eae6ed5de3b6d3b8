// KOLO_DETERMINISTIC=1 through real jobs (kolorun, tcp and shm): every result equals, bit for bit,
// the rank-order reference that deterministic_worker computes, whatever the fusion threshold,
// the algorithm switches, segment and chunk sizes, submission order and delays, and the backend;
// without the knob some of these change the bits (so the checks can fail); ranks that disagree
// on the knob and backends that cannot honour it fail at init. Paths come from CMake.
#include <gtest/gtest.h>

#include <regex>
#include <set>
#include <string>

#include "tests/support/run_command.h"

namespace {

using kolo::testing::count_occurrences;
using kolo::testing::ProcessRun;
using kolo::testing::run_command;

const std::string kWorker = KOLO_TEST_DETERMINISTIC_WORKER;
const std::string kKolorun = KOLO_TEST_KOLORUN;

// The checksums the ranks printed ("rank R checksum H").
std::set<std::string> checksums(const std::string& output) {
  std::set<std::string> out;
  const std::regex line("rank [0-9]+ checksum ([0-9a-f]+)");
  for (auto it = std::sregex_iterator(output.begin(), output.end(), line);
       it != std::sregex_iterator(); ++it)
    out.insert((*it)[1]);
  return out;
}

// One job of np ranks with `env` (KOLO_*=... prefixes) and worker arguments; expects every rank
// to pass and returns the job's one checksum.
std::string run_job(int np, const std::string& env, const std::string& args) {
  ProcessRun r = run_command(
      env + " " + kKolorun + " -np " + std::to_string(np) + " " + kWorker + " " + args, 120);
  EXPECT_EQ(r.exit_code, 0) << env << "\n" << r.output;
  EXPECT_EQ(count_occurrences(r.output, "deterministic checks passed"), np) << env << "\n"
                                                                            << r.output;
  const std::set<std::string> sums = checksums(r.output);
  EXPECT_EQ(sums.size(), 1u) << env << "\n" << r.output;
  return sums.empty() ? "" : *sums.begin();
}

class Deterministic : public ::testing::TestWithParam<int> {};

// Every configuration gives the rank-order reference (checked on every rank, every element);
// the checksums agreeing across configurations is then a consequence, asserted all the same.
TEST_P(Deterministic, EveryConfigurationGivesTheRankOrderReference) {
  const int np = GetParam();
  const std::string on = "KOLO_DETERMINISTIC=1 ";
  std::set<std::string> seen;
  for (const char* fusion : {"0", "64KiB", "4MiB", "64MiB"}) {
    for (const char* backend : {"tcp", "shm"}) {
      const std::string env =
          on + "KOLO_CPU_OPERATIONS=" + backend + " KOLO_FUSION_THRESHOLD=" + fusion;
      seen.insert(run_job(np, env, "--seed 7"));
    }
  }
  // The small-message switch and the segment size (tcp), the one-round switch and the chunk
  // (shm), the cycle time, and random delays before each submission.
  seen.insert(run_job(np, on + "KOLO_CPU_OPERATIONS=tcp KOLO_RING_THRESHOLD=0", "--seed 7"));
  seen.insert(run_job(np, on + "KOLO_CPU_OPERATIONS=tcp KOLO_RING_THRESHOLD=64MiB", "--seed 7"));
  seen.insert(run_job(np, on + "KOLO_CPU_OPERATIONS=tcp KOLO_RING_SEGMENT=4KiB", "--seed 7"));
  seen.insert(run_job(
      np, on + "KOLO_CPU_OPERATIONS=shm KOLO_SHM_CHUNK=4KiB KOLO_SHM_THRESHOLD=1KiB", "--seed 7"));
  seen.insert(
      run_job(np, on + "KOLO_CPU_OPERATIONS=tcp KOLO_CYCLE_TIME=20ms", "--seed 7 --delays"));
  seen.insert(run_job(np, on + "KOLO_CPU_OPERATIONS=shm KOLO_CYCLE_TIME=0", "--seed 7 --delays"));
  EXPECT_EQ(seen.size(), 1u);
}
INSTANTIATE_TEST_SUITE_P(Np, Deterministic, ::testing::Values(2, 3, 4));

// Other tensor sets (seeds), fewer configurations each.
TEST(Deterministic, RandomTensorSets) {
  for (int seed : {1, 2, 3}) {
    for (const char* env :
         {"KOLO_DETERMINISTIC=1 KOLO_CPU_OPERATIONS=tcp KOLO_FUSION_THRESHOLD=1MiB",
          "KOLO_DETERMINISTIC=1 KOLO_CPU_OPERATIONS=shm KOLO_FUSION_THRESHOLD=128KiB"})
      run_job(3, env, "--seed " + std::to_string(seed) + " --tensors 40");
  }
}

// The control: without the knob, 3 ranks on tcp, the fusion threshold moves elements between
// the ring's blocks, whose sums start at different ranks, and the bits change.
TEST(Deterministic, WithoutTheKnobTheFusionThresholdChangesTheBits) {
  std::set<std::string> seen;
  for (const char* fusion : {"0", "64MiB"}) {
    ProcessRun r =
        run_command(std::string("KOLO_CPU_OPERATIONS=tcp KOLO_FUSION_THRESHOLD=") + fusion + " " +
                        kKolorun + " -np 3 " + kWorker + " --seed 7 --no-check",
                    120);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    const std::set<std::string> sums = checksums(r.output);
    ASSERT_EQ(sums.size(), 1u) << r.output;
    seen.insert(*sums.begin());
  }
  EXPECT_EQ(seen.size(), 2u) << "fusion 0 and 64MiB gave the same bits without the knob";
}

// A job-wide knob: ranks that disagree fail at init, every one naming it.
TEST(Deterministic, SetOnSomeRanksOnlyFailsEveryRankNamingIt) {
  ProcessRun r = run_command("KOLO_CPU_OPERATIONS=tcp " + kKolorun +
                                 " -np 3 sh -c \"if [ \\$KOLO_RANK = 1 ]; then export "
                                 "KOLO_DETERMINISTIC=1; fi; exec " +
                                 kWorker + "\"",
                             60);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "KOLO_DETERMINISTIC differs between ranks"), 3) << r.output;
}

// The hierarchical allreduce sums within each host first: refused beside the knob, at init.
TEST(Deterministic, HierarchicalAllreduceIsRefusedBesideIt) {
  ProcessRun r = run_command(
      "KOLO_DETERMINISTIC=1 KOLO_HIERARCHICAL_ALLREDUCE=1 " + kKolorun + " -np 2 " + kWorker, 60);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_occurrences(r.output,
                              "KOLO_DETERMINISTIC=1 and KOLO_HIERARCHICAL_ALLREDUCE=1 "
                              "cannot be combined"),
            2)
      << r.output;
}

// kolorun --deterministic is the knob (its flag comes from the registry row).
TEST(Deterministic, KolorunFlag) {
  ProcessRun r = run_command(
      "KOLO_CPU_OPERATIONS=tcp " + kKolorun + " --deterministic -np 2 " + kWorker + " --seed 4",
      120);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "deterministic checks passed"), 2) << r.output;
}

#ifdef KOLO_TEST_MPIRUN
// mpi runs MPI's own algorithms: refused at init, with the reason and what to do instead.
TEST(Deterministic, MpiRefusesTheKnobAtInit) {
  ProcessRun r =
      run_command("OMPI_MCA_btl_vader_single_copy_mechanism=none KOLO_DETERMINISTIC=1 " +
                      std::string(KOLO_TEST_MPIRUN) +
                      " --allow-run-as-root --oversubscribe -x KOLO_DETERMINISTIC -np 2 " + kWorker,
                  60);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("KOLO_DETERMINISTIC=1: backend mpi cannot reduce in a fixed order"),
            std::string::npos)
      << r.output;
}
#endif

}  // namespace
