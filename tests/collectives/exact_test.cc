// KOLO_REDUCTION=exact through real jobs (kolorun; 2, 3 and 4 ranks; tcp and shm): every element
// of every float sum and average (fused, piggy-backed, past one chunk of accumulators, and a
// reducescatter) equals the correctly rounded exact sum that exact_check.py computes with Python
// integers, on every rank, and jobs that give each element the same multiset of values in
// another rank order give the same bits. Without the knob the check fails (so it can). Ranks that
// disagree on the knob, and a value it does not take, fail at init. Paths come from CMake.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "tests/support/run_command.h"

namespace {

using kolo::testing::count_occurrences;
using kolo::testing::ProcessRun;
using kolo::testing::run_command;

const std::string kWorker = KOLO_TEST_EXACT_WORKER;
const std::string kChecker = KOLO_TEST_EXACT_CHECKER;
const std::string kKolorun = KOLO_TEST_KOLORUN;
const std::string kPython = KOLO_TEST_PYTHON;

std::string fresh_dir() {
  char tmpl[] = "/tmp/kolo_exact_XXXXXX";
  const char* d = mkdtemp(tmpl);
  EXPECT_NE(d, nullptr);
  return d ? d : "/tmp";
}

// One job into a fresh folder; returns the folder.
std::string run_job(int np, const std::string& env, int rotate = 0, bool chunks = false) {
  const std::string dir = fresh_dir();
  ProcessRun r = run_command(env + " " + kKolorun + " -np " + std::to_string(np) + " " + kWorker +
                                 " --seed 5 --rotate " + std::to_string(rotate) + " --chunks " +
                                 (chunks ? "1" : "0") + " --out " + dir,
                             120);
  EXPECT_EQ(r.exit_code, 0) << env << "\n" << r.output;
  EXPECT_EQ(count_occurrences(r.output, "exact worker done"), np) << env << "\n" << r.output;
  return dir;
}

ProcessRun check(const std::string& dirs) {
  return run_command(kPython + " " + kChecker + " " + dirs, 120);
}

class Exact : public ::testing::TestWithParam<int> {};

TEST_P(Exact, EveryElementIsTheCorrectlyRoundedSum) {
  const int np = GetParam();
  std::string dirs;
  // One job also sums a tensor past one chunk of accumulators (slower to check).
  for (const char* backend : {"tcp", "shm"})
    dirs += run_job(np, std::string("KOLO_REDUCTION=exact KOLO_CPU_OPERATIONS=") + backend, 0,
                    backend == std::string("tcp")) +
            " ";
  // The same multisets in another rank order, and beside deterministic mode, fusion off.
  dirs +=
      run_job(np, "KOLO_REDUCTION=exact KOLO_CPU_OPERATIONS=tcp KOLO_FUSION_THRESHOLD=0", 1) + " ";
  dirs += run_job(np, "KOLO_REDUCTION=exact KOLO_DETERMINISTIC=1 KOLO_CPU_OPERATIONS=shm", 2);
  ProcessRun r = check(dirs);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "every element correctly rounded"), 4) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "4 jobs gave identical results"), 1) << r.output;
  run_command("rm -rf " + dirs);
}
INSTANTIATE_TEST_SUITE_P(Np, Exact, ::testing::Values(2, 3, 4));

// The control: floating-point sums in rank order are not the correctly rounded ones.
TEST(Exact, WithoutTheKnobTheCheckFails) {
  const std::string dir = run_job(3, "KOLO_DETERMINISTIC=1 KOLO_CPU_OPERATIONS=tcp");
  ProcessRun r = check(dir);
  run_command("rm -rf " + dir);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "want"), 1) << r.output;
}

#ifdef KOLO_TEST_MPIRUN
// mpi sums the accumulators with MPI_Allreduce, whose order we do not control: integer sums
// do not care (deterministic mode refuses mpi; exact mode needs no order). "Mpirun" in the name:
// the ASan check runs jobs under mpirun without the leak check (Open MPI's own allocations).
TEST(Exact, MpirunGivesTheCorrectlyRoundedSums) {
  const std::string dir = fresh_dir();
  ProcessRun r = run_command("OMPI_MCA_btl_vader_single_copy_mechanism=none KOLO_REDUCTION=exact " +
                                 std::string(KOLO_TEST_MPIRUN) +
                                 " --allow-run-as-root --oversubscribe -x KOLO_REDUCTION -x "
                                 "OMPI_MCA_btl_vader_single_copy_mechanism -np 3 " +
                                 kWorker + " --seed 5 --rotate 1 --out " + dir,
                             120);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  ProcessRun c = check(dir);
  EXPECT_EQ(c.exit_code, 0) << c.output;
  EXPECT_EQ(count_occurrences(c.output, "3 ranks, 10 tensors, every element correctly rounded"), 1)
      << c.output;
  run_command("rm -rf " + dir);
}
#endif

TEST(Exact, SetOnSomeRanksOnlyFailsEveryRankNamingIt) {
  ProcessRun r = run_command("KOLO_CPU_OPERATIONS=tcp " + kKolorun +
                                 " -np 3 sh -c \"if [ \\$KOLO_RANK = 1 ]; then export "
                                 "KOLO_REDUCTION=exact; fi; exec " +
                                 kWorker + "\"",
                             60);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "KOLO_REDUCTION differs between ranks"), 3) << r.output;
}

TEST(Exact, AnUnknownValueIsRefusedNamingTheChoices) {
  ProcessRun r = run_command("KOLO_REDUCTION=fast " + kKolorun + " -np 2 " + kWorker, 60);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("KOLO_REDUCTION"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("exact"), std::string::npos) << r.output;
}

}  // namespace
