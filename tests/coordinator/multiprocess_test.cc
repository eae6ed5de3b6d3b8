// Starts coordinator_worker jobs through kolorun and checks every rank's output.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/support/run_command.h"

namespace {

using kolo::testing::count_occurrences;
using kolo::testing::ProcessRun;
using kolo::testing::run_command;

ProcessRun job(int np, const std::string& args) {
  return run_command(std::string(KOLO_TEST_KOLORUN) + " -np " + std::to_string(np) + " " +
             KOLO_TEST_WORKER + " " + args);
}

class Ranks : public ::testing::TestWithParam<int> {};

TEST_P(Ranks, EveryOperation) {
  auto r = job(GetParam(), "ops");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "ops passed"), GetParam()) << r.output;
}
INSTANTIATE_TEST_SUITE_P(Np, Ranks, ::testing::Values(1, 2, 3, 4));

// The whole coordinator (negotiation on the control plane, fused data) over each CPU backend
// that runs under kolorun.
class Backends : public ::testing::TestWithParam<const char*> {};

TEST_P(Backends, EveryOperationAndOrder) {
  const std::string env = std::string("KOLO_CPU_OPERATIONS=") + GetParam() + " ";
  for (const char* mode : {"ops", "orders"}) {
    auto r = run_command(env + KOLO_TEST_KOLORUN + " -np 3 " + KOLO_TEST_WORKER + " " + mode);
    EXPECT_EQ(r.exit_code, 0) << mode << "\n" << r.output;
    EXPECT_EQ(count_occurrences(r.output, std::string(mode) + " passed"), 3) << r.output;
  }
}
INSTANTIATE_TEST_SUITE_P(Cpu, Backends, ::testing::Values("tcp", "shm"));

TEST(CoordinatorJob, DifferentOrdersAndThreads) {
  auto r = job(3, "orders");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "orders passed"), 3) << r.output;
}

TEST(CoordinatorJob, TenThousandSmallTensors) {
  auto r = job(2, "many");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "many passed"), 2) << r.output;
}

TEST(CoordinatorJob, MismatchMessageOnEveryRank) {
  auto r = job(2, "mismatch");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "error: Mismatch: allreduce 'w': shape differs across ranks: rank 0 "
                            "has [3]; rank 1 has [5]"),
            2)
      << r.output;
}

// A frozen rank (SIGSTOP) blocks the control plane's collective, where rank 0's stall
// inspector cannot see it: the control plane's waits are bounded by KOLO_STALL_SHUTDOWN_TIME
// too, so the job fails after about that long (not the 60 s op timeout), naming the rank.
TEST(CoordinatorJob, AFrozenRankFailsTheJobAfterTheStallShutdownTime) {
  auto r = run_command("KOLO_STALL_SHUTDOWN_TIME=2s KOLO_OP_TIMEOUT=60s " +
                           std::string(KOLO_TEST_KOLORUN) + " -np 2 --grace 1s " +
                           KOLO_TEST_WORKER + " freeze",
                       40);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.exit_code, 124) << r.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex(R"(rank 0 failed after (\d+) ms: (.*))")))
      << r.output;
  EXPECT_GE(std::stol(m[1]), 1500) << r.output;
  EXPECT_LT(std::stol(m[1]), 10000) << r.output;
  EXPECT_NE(m[2].str().find("rank 1"), std::string::npos) << r.output;
}

TEST(CoordinatorJob, TimelineHasATrackPerRankAndEveryPhase) {
  char dir[] = "/tmp/kolo-coord-timeline-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  auto r = job(2, std::string("timeline ") + dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (int rank = 0; rank < 2; ++rank) {
    std::ifstream in(std::string(dir) + "/trace." + std::to_string(rank) + ".json");
    ASSERT_TRUE(in.good());
    nlohmann::json trace = nlohmann::json::parse(in);
    auto events = trace.is_array() ? trace : trace["traceEvents"];
    std::set<std::string> names;
    for (const auto& e : events) {
      if (e.contains("pid")) EXPECT_EQ(e["pid"].get<int>(), rank);
      if (e.contains("name")) names.insert(e["name"].get<std::string>());
    }
    // Both ranks on this host: the default CPU backend is shm.
    for (const char* phase : {"ALLREDUCE", "QUEUE", "NEGOTIATE", "WAIT_FOR_DATA",
                              "MEMCPY_IN_FUSION", "SHM_ALLREDUCE", "MEMCPY_OUT_FUSION", "CALLBACK"})
      EXPECT_TRUE(names.count(phase)) << "rank " << rank << " lacks " << phase;
  }
}

// NCCL-style echo: at info, rank 0 (only) logs each variable the environment set, once; a
// near miss of a real name is a warning from kolorun (before start) and from rank 0 (at init).
TEST(CoordinatorJob, InfoLevelEchoesTheSetVariablesOnceOnRankZero) {
  auto r = run_command("KOLO_LOG_LEVEL=info KOLO_FUSION_THRESHOLD=8MiB KOLO_CYCLETIME=2ms " +
                       std::string(KOLO_TEST_KOLORUN) + " -np 2 --cycle-time 3ms " +
                       KOLO_TEST_WORKER + " ops");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "ops passed"), 2) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "KOLO_FUSION_THRESHOLD set by environment to 8MiB"), 1)
      << r.output;
  EXPECT_EQ(count_occurrences(r.output, "KOLO_LOG_LEVEL set by environment to info"), 1)
      << r.output;
  // A kolorun flag reaches the ranks through their environment.
  EXPECT_EQ(count_occurrences(r.output, "KOLO_CYCLE_TIME set by environment to 3ms"), 1)
      << r.output;
  EXPECT_EQ(count_occurrences(r.output, "[kolo I rank 0 "), 3) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "[kolo I rank 1 "), 0) << r.output;
  const std::string warning =
      "KOLO_CYCLETIME is not a Kolo variable and is ignored; did you mean KOLO_CYCLE_TIME?";
  EXPECT_EQ(count_occurrences(r.output, "kolorun: warning: " + warning), 1) << r.output;
  EXPECT_EQ(count_occurrences(r.output, warning), 2) << r.output;
}

// init() validates every knob before the rendezvous: with a store address nobody serves, a bad
// value is the error at once (not a 30 s connect timeout).
TEST(CoordinatorJob, InitRejectsABadValueBeforeConnecting) {
  auto r = run_command(
      "KOLO_RANK=0 KOLO_SIZE=2 KOLO_SECRET=s KOLO_STORE_ADDR=127.0.0.1:1 KOLO_OP_TIMEOUT=0 " +
          std::string(KOLO_TEST_WORKER) + " ops",
      20);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("init: InvalidArgument: KOLO_OP_TIMEOUT=0 is invalid: expected a "
                          "duration with an optional unit"),
            std::string::npos)
      << r.output;
}

#ifdef KOLO_TEST_MPIRUN
// Under mpirun the world comes from MPI; the default backend is mpi, and tcp and shm work too.
TEST(CoordinatorJob, EveryOperationUnderMpirun) {
  for (const char* ops : {"mpi", "tcp", "shm"}) {
    auto r = run_command("OMPI_MCA_btl_vader_single_copy_mechanism=none KOLO_CPU_OPERATIONS=" +
                 std::string(ops) + " " + KOLO_TEST_MPIRUN +
                 " --allow-run-as-root --oversubscribe -x KOLO_CPU_OPERATIONS -np 2 " +
                 KOLO_TEST_WORKER + " ops");
    EXPECT_EQ(r.exit_code, 0) << ops << "\n" << r.output;
    EXPECT_EQ(count_occurrences(r.output, "rank 0: ops passed") + count_occurrences(r.output, "rank 1: ops passed"), 2)
        << ops << "\n" << r.output;
  }
}

// A rank whose configuration is invalid fails before it joins the job; mpirun then ends the
// others at once, and the output names the variable (rank 0 used to tear down the store after
// joining, leaving the others 30 s in "cannot connect to rank 0's rendezvous store").
TEST(CoordinatorJob, AnInvalidValueOnOneRankEndsTheJobUnderMpirunNamingIt) {
  for (const char* failing : {"0", "1"}) {
    auto r = run_command(
        "OMPI_MCA_btl_vader_single_copy_mechanism=none " + std::string(KOLO_TEST_MPIRUN) +
            " --allow-run-as-root --oversubscribe -np 2 sh -c \"if [ \\$OMPI_COMM_WORLD_RANK = " +
            failing + " ]; then export KOLO_OP_TIMEOUT=0; fi; exec " + KOLO_TEST_WORKER + " ops\"",
        20);
    EXPECT_NE(r.exit_code, 0) << failing << "\n" << r.output;
    EXPECT_NE(r.exit_code, 124) << "the job outlived the failing rank " << failing << "\n"
                                << r.output;
    EXPECT_NE(r.output.find("init: InvalidArgument: KOLO_OP_TIMEOUT=0 is invalid"),
              std::string::npos)
        << r.output;
    EXPECT_EQ(r.output.find("rendezvous store"), std::string::npos) << r.output;
  }
}

// The World and the default backend come from the mpi backend's registry entry: without
// KOLO_CPU_OPERATIONS the backend's spans in the timeline are mpi's.
TEST(CoordinatorJob, MpiIsTheDefaultBackendUnderMpirun) {
  char dir[] = "/tmp/kolo-coord-mpirun-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  auto r =
      run_command("env -u KOLO_CPU_OPERATIONS OMPI_MCA_btl_vader_single_copy_mechanism=none " +
                  std::string(KOLO_TEST_MPIRUN) + " --allow-run-as-root --oversubscribe -np 2 " +
                  KOLO_TEST_WORKER + " timeline " + dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (int rank = 0; rank < 2; ++rank) {
    std::ifstream in(std::string(dir) + "/trace." + std::to_string(rank) + ".json");
    ASSERT_TRUE(in.good()) << "rank " << rank;
    nlohmann::json trace = nlohmann::json::parse(in);
    auto events = trace.is_array() ? trace : trace["traceEvents"];
    std::set<std::string> names;
    for (const auto& e : events)
      if (e.contains("name")) names.insert(e["name"].get<std::string>());
    EXPECT_TRUE(names.count("MPI_ALLREDUCE")) << "rank " << rank;
    EXPECT_FALSE(names.count("TCP_ALLREDUCE")) << "rank " << rank;
    EXPECT_FALSE(names.count("SHM_ALLREDUCE")) << "rank " << rank;
  }
  std::filesystem::remove_all(dir);
}
#endif

}  // namespace
