// Multi-process collectives tests: real processes through kolorun (tcp, shm) and mpirun (mpi,
// and tcp under mpirun), plus fault cases: a rank killed mid-collective, a wrong secret,
// disagreeing counts, no shm segment left behind, and two "nodes" in network namespaces. Paths
// come from CMake (see CMakeLists.txt).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "rendezvous/tcp_store.h"
#include "tests/support/run_command.h"
#include "tests/support/two_namespaces.h"

namespace {

using kolo::testing::count_occurrences;
using kolo::testing::ProcessRun;
using kolo::testing::run_command;

const std::string kWorker = KOLO_TEST_WORKER;

class Kolorun : public ::testing::TestWithParam<int> {};

TEST_P(Kolorun, EveryCollectiveTcp) {
  const int np = GetParam();
  ProcessRun r = run_command(std::string(KOLO_TEST_KOLORUN) + " -np " + std::to_string(np) + " " +
                             kWorker + " --backend tcp");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "checks passed"), np) << r.output;
}
INSTANTIATE_TEST_SUITE_P(Np, Kolorun, ::testing::Values(1, 2, 3, 4));

// shm with 4 KiB buffers and a 1 KiB one-round threshold, so that the checks cross the
// one-round/chunked switch and several chunk and region boundaries: counts 0, 1, P-1, P+1, a
// few chunks (1031) and more (3001). Chunked allreduces of 6 KiB and more write their results
// with streaming stores, so both ways of writing them are checked.
class KolorunShm : public ::testing::TestWithParam<int> {};

TEST_P(KolorunShm, EveryCollectiveShm) {
  const int np = GetParam();
  ProcessRun r =
      run_command("KOLO_SHM_CHUNK=4KiB KOLO_SHM_THRESHOLD=1KiB KOLO_SHM_STREAM_THRESHOLD=6KiB " +
                  std::string(KOLO_TEST_KOLORUN) + " -np " + std::to_string(np) + " " + kWorker +
                  " --backend shm --counts 0,1," + std::to_string(np - 1) + "," +
                  std::to_string(np + 1) + ",1031,3001");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "checks passed"), np) << r.output;
}
INSTANTIATE_TEST_SUITE_P(Np, KolorunShm, ::testing::Values(1, 2, 3, 4, 5, 6, 7, 8));

// The defaults (512 KiB buffers, 32 KiB threshold) on the standard counts.
TEST(KolorunShmDefaults, EveryCollectiveShm) {
  ProcessRun r = run_command(std::string(KOLO_TEST_KOLORUN) + " -np 3 " + kWorker +
                             " --backend shm --counts 0,1,7,1031,9000");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "checks passed"), 3) << r.output;
}

#ifdef KOLO_TEST_MPIRUN
std::string mpirun(int np) {
  return "OMPI_MCA_btl_vader_single_copy_mechanism=none " + std::string(KOLO_TEST_MPIRUN) +
         " --allow-run-as-root --oversubscribe -np " + std::to_string(np) + " ";
}

class Mpirun : public ::testing::TestWithParam<int> {};

TEST_P(Mpirun, EveryCollectiveMpi) {
  const int np = GetParam();
  ProcessRun r = run_command(mpirun(np) + kWorker + " --backend mpi");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "checks passed"), np) << r.output;
}
INSTANTIATE_TEST_SUITE_P(Np, Mpirun, ::testing::Values(1, 2, 3, 4));

// world_from_mpi() hosts a rendezvous store on rank 0, so the tcp backend works under mpirun.
TEST(MpirunWorld, TcpBackendUnderMpirun) {
  ProcessRun r = run_command(mpirun(3) + kWorker + " --backend tcp");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "checks passed"), 3) << r.output;
}
#endif

// Starts `size` ranks by hand against a store hosted here; prints "rank R exit E" per rank.
std::string by_hand(const kolo::TcpStoreServer& server, int size, const std::string& args,
                    const std::string& secret_of_rank1 = "") {
  std::string script;
  for (int r = 0; r < size; ++r) {
    const std::string secret = r == 1 && !secret_of_rank1.empty() ? secret_of_rank1 : "s3cret";
    script += "KOLO_RANK=" + std::to_string(r) + " KOLO_SIZE=" + std::to_string(size) +
              " KOLO_STORE_ADDR=" + server.address() + " KOLO_SECRET=" + secret + " " + kWorker +
              " " + args + " & p" + std::to_string(r) + "=$!; ";
  }
  for (int r = 0; r < size; ++r)
    script += "wait $p" + std::to_string(r) + "; echo \"rank " + std::to_string(r) + " exit $?\"; ";
  return script;
}

// Rank 1 of 3 SIGKILLs itself mid-allreduce: the others fail instead of hanging. shm's
// survivors notice the death itself (a pidfd), not a timeout, and name the dead rank.
class KilledRank : public ::testing::TestWithParam<const char*> {};

TEST_P(KilledRank, MidAllreduceFailsTheOthers) {
  const std::string backend = GetParam();
  auto server = kolo::TcpStoreServer::start("127.0.0.1", 0, "s3cret");
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  ProcessRun r = run_command(by_hand(**server, 3, "--backend " + backend + " --mode kill"), 40);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("rank 1 exit 137"), std::string::npos) << r.output;  // SIGKILL
  EXPECT_NE(r.output.find("rank 0 exit 3"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank 2 exit 3"), std::string::npos) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "allreduce failed"), 2) << r.output;
  if (backend == "shm") {
    EXPECT_EQ(count_occurrences(r.output, "shm allreduce: rank 1 (pid "), 2) << r.output;
  }
}
INSTANTIATE_TEST_SUITE_P(Backend, KilledRank, ::testing::Values("tcp", "shm"));

// Started by hand, so that no launcher stops the others when the first rank fails.
TEST(Faults, DisagreeingCountsFailEveryRankShm) {
  auto server = kolo::TcpStoreServer::start("127.0.0.1", 0, "s3cret");
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  ProcessRun r = run_command(by_hand(**server, 3, "--backend shm --mode mismatch"), 40);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (int rank = 0; rank < 3; ++rank)
    EXPECT_NE(r.output.find("rank " + std::to_string(rank) + " exit 3"), std::string::npos)
        << r.output;
  EXPECT_EQ(count_occurrences(r.output, "allreduce failed"), 3) << r.output;
  EXPECT_NE(r.output.find("rank 0 runs allreduce of 10 float32 (sum)"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("rank 2 runs allreduce of 12 float32 (sum)"), std::string::npos)
      << r.output;
}

// The segment is an anonymous memfd: nothing appears in /dev/shm, and once the job is over
// (here after a rank was SIGKILLed) no process maps it.
TEST(Faults, NoSegmentLeftShm) {
  ProcessRun before = run_command("ls -A /dev/shm");
  auto server = kolo::TcpStoreServer::start("127.0.0.1", 0, "s3cret");
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  ProcessRun job = run_command(by_hand(**server, 3, "--backend shm --mode kill"), 40);
  EXPECT_NE(job.output.find("rank 0 exit 3"), std::string::npos) << job.output;
  ProcessRun normal = run_command(std::string(KOLO_TEST_KOLORUN) + " -np 2 " + kWorker +
                                  " --backend shm --counts 1");
  EXPECT_EQ(normal.exit_code, 0) << normal.output;
  EXPECT_EQ(run_command("ls -A /dev/shm").output, before.output);
  // The command lines of the processes that map a Kolo segment, if any is this test's worker
  // (other jobs on the machine may have segments of their own).
  ProcessRun maps = run_command(
      "for m in $(grep -l memfd:kolo-shm /proc/[0-9]*/maps 2>/dev/null); do "
      "tr \"\\0\" \" \" < ${m%/maps}/cmdline; echo; done | grep -F " +
      kWorker);
  EXPECT_EQ(maps.output, "") << maps.output;
}

// A rank with another job's secret is refused (shm: rank 0 names the failed authentication of
// the impostor, and waits out the 10 s connect timeout for the real rank 1).
class WrongSecret : public ::testing::TestWithParam<const char*> {};

TEST_P(WrongSecret, IsRefused) {
  const std::string backend = GetParam();
  auto server = kolo::TcpStoreServer::start("127.0.0.1", 0, "s3cret");
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  ProcessRun r = run_command(by_hand(**server, 2, "--backend " + backend, "another-secret"), 40);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "checks passed"), 0) << r.output;
  EXPECT_NE(r.output.find("rank 0 exit 1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank 1 exit 1"), std::string::npos) << r.output;
  // Rank 1 is already turned away by the store: the server does not prove rank 1's secret.
  EXPECT_NE(r.output.find("does not know this job's secret"), std::string::npos) << r.output;
}
INSTANTIATE_TEST_SUITE_P(Backend, WrongSecret, ::testing::Values("tcp", "shm"));

// Two nodes of two ranks each, one network namespace per node joined by a veth pair: the
// ranks reach each other only through 10.231.0.1/2, as on a real two-host job.
TEST(TwoNodes, NetworkNamespaces) {
  kolo::testing::TwoNamespaces namespaces("kolo");
  if (!namespaces.ok()) GTEST_SKIP() << namespaces.why();
  ProcessRun link = namespaces.link("10.231.0");
  ASSERT_EQ(link.exit_code, 0) << link.output;
  const std::string job =
      std::string(KOLO_TEST_KOLORUN) + " --nnodes 2 --rdzv 10.231.0.1:29731 --secret nodes -np 2 ";
  // The tcp backend publishes the address named by KOLO_TCP_HOST: each node's veth address.
  ProcessRun r =
      run_command(namespaces.a() + "env KOLO_TCP_HOST=10.231.0.1 " + job + "--node-rank 0 " +
                      kWorker + " --backend tcp & p=$!; " + namespaces.b() +
                      "env KOLO_TCP_HOST=10.231.0.2 " + job + "--node-rank 1 " + kWorker +
                      " --backend tcp; e=$?; wait $p; "
                      "echo \"node exits $? $e\"",
                  60);
  EXPECT_NE(r.output.find("node exits 0 0"), std::string::npos) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "checks passed"), 4) << r.output;
}

}  // namespace
