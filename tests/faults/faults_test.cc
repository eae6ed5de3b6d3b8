// The fault-injection suite (label "faults"): real jobs of fault_worker, started by kolorun
// (one or two nodes) or mpirun, and a real fault injected mid-training: SIGKILL or SIGSTOP of
// a rank or of a launcher, node 0 and its store dying, the network link going down. Each test
// asserts Kolo's promise for that fault (docs/reliability.md): every surviving rank fails
// naming the peer within its bound, every launcher exits within seconds after that, no process
// is left, and no rank reports success or a wrong result.
//
// The bounds are generous multiples of the configured timeouts: they separate "detected" from
// "waited out a default timeout" (minutes), not fast from slow.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <regex>
#include <string>

#include "launch.h"
#include "rendezvous/tcp_store.h"
#include "tests/support/run_command.h"
#include "tests/support/two_namespaces.h"

namespace kolo::faults {
namespace {

using namespace std::chrono_literals;

const std::string kKolorun = KOLO_TEST_KOLORUN;
const std::string kWorker = KOLO_TEST_FAULT_WORKER;

int exit_code(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int free_port() { return TcpStoreServer::start("127.0.0.1", 0, "port-finder").value()->port(); }

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Checks `observed` against `bound` and prints the pair, for docs/reliability.md's table.
void expect_within(const std::string& what, Clock::duration observed, double bound_s,
                   const Launch& job) {
  std::printf("[fault] %s: %.2f s (bound %.1f s)\n", what.c_str(), seconds(observed), bound_s);
  EXPECT_LT(seconds(observed), bound_s) << what << "\n" << job.output();
}

// Whatever the fault, no rank may claim success or compute a wrong number.
void expect_no_false_success(const Launch& job) {
  EXPECT_EQ(job.output().find("WRONG RESULT"), std::string::npos) << job.output();
  EXPECT_EQ(job.output().find(" done"), std::string::npos) << job.output();
}

// Whether `pid` has ended by `deadline`.
bool ends_by(pid_t pid, Clock::time_point deadline) {
  while (!has_ended(pid) && Clock::now() < deadline) std::this_thread::sleep_for(20ms);
  return has_ended(pid);
}

void expect_every_rank_gone(const Launch& job, std::chrono::milliseconds bound) {
  const auto deadline = Clock::now() + bound;
  for (const auto& [rank, pid] : job.rank_pids())
    EXPECT_TRUE(ends_by(pid, deadline))
        << "rank " << rank << " (pid " << pid << ") was left running";
}

// The shm backend's segments are memfds: they live exactly as long as a process maps them. None
// may be left mapped by any process the job started (kolorun's and the ranks' descendants,
// told apart from other jobs by their start time, `since` = start_ticks of kolorun).
constexpr const char* kShmSegment = "memfd:kolo-shm";
void expect_no_shm_segment_left(uint64_t since) {
  for (pid_t pid : kolo::testing::processes_mapping(kShmSegment, since)) {
    ADD_FAILURE() << "pid " << pid << " still maps a shm segment of the job";
  }
}

// Ranks 0, 1 and 3 of a job whose rank 2 failed: what each names as the cause (its error's
// text before what it saw itself) contains `named`.
void expect_survivors_name(const Launch& job, const std::string& backend,
                           const std::string& named) {
  const std::string out = job.output();
  for (int r : {0, 1, 3}) {
    std::smatch m;
    const std::string line_re = "rank " + std::to_string(r) + " failed [^\n]*";
    ASSERT_TRUE(std::regex_search(out, m, std::regex(line_re))) << out;
    const std::string line = m.str();
    const std::string cause = line.substr(0, line.find("; this rank"));
    EXPECT_NE(cause.find(named), std::string::npos) << backend << ": " << line;
    std::printf("[fault] %s: %s\n", backend.c_str(), line.c_str());
  }
}

// A kolorun job of `np` ranks on one node, each running until an error.
std::string kolorun_job(int np, const std::string& env = "") {
  return env + " exec " + kKolorun + " -np " + std::to_string(np) + " --grace 1s " + kWorker + " 0";
}

// ---- One node, kolorun ---------------------------------------------------------------------

// One node, for each backend of one host: shm (the default there) and tcp.
class OneNode : public ::testing::TestWithParam<const char*> {
 protected:
  std::string backend() const { return GetParam(); }
  std::string backend_env() const { return "KOLO_CPU_OPERATIONS=" + backend(); }
};
INSTANTIATE_TEST_SUITE_P(Backends, OneNode, ::testing::Values("shm", "tcp"));

// SIGKILL of a rank: the survivors see their connections break and fail at once, naming it;
// kolorun reports it and exits after its grace period.
TEST_P(OneNode, ARankKilledMidTrainingFailsTheOthersNamingIt) {
  Launch job(kolorun_job(3, backend_env() + " FAULT_SURVIVE_SIGTERM=1 KOLO_OP_TIMEOUT=30s"));
  const uint64_t since = kolo::testing::start_ticks(job.pid());
  ASSERT_TRUE(job.wait_for("rank 2 step 50", 1, 30s)) << job.output();
  const pid_t victim = job.rank_pids().at(1);
  const auto killed = Clock::now();
  ::kill(victim, SIGKILL);
  // Each survivor names rank 1, directly or as the job's first recorded failure
  // (coordinator/failure_board.h; EverySurvivorNamesTheKilledRank checks it with 4 ranks).
  auto failed = job.wait_for(R"(rank [02] failed .*PeerFailure: .*rank [12])", 2, 10s);
  ASSERT_TRUE(failed) << job.output();
  expect_within("rank SIGKILLed (" + backend() + "): survivors fail", *failed - killed, 5.0, job);
  auto status = job.finish(20s);
  ASSERT_TRUE(status) << job.output();
  EXPECT_EQ(exit_code(*status), 128 + SIGKILL) << job.output();
  expect_within("rank SIGKILLed (" + backend() + "): kolorun exits", job.ended() - killed,
                1.0 /* grace */ + 5.0, job);
  EXPECT_NE(job.output().find("kolorun: rank 1 (pid " + std::to_string(victim) +
                              ") was killed by signal 9 (SIGKILL)"),
            std::string::npos)
      << job.output();
  expect_every_rank_gone(job, 5s);
  expect_no_shm_segment_left(since);
  expect_no_false_success(job);
}

// SIGKILL of rank 2 of 4: every survivor's error names rank 2, whichever link it saw break
// first. Without the failure board (coordinator/failure_board.h) a survivor could name a live
// rank that had failed a moment earlier because of rank 2; the first recorded failure wins.
TEST_P(OneNode, EverySurvivorNamesTheKilledRank) {
  Launch job(kolorun_job(4, backend_env() + " FAULT_SURVIVE_SIGTERM=1 KOLO_OP_TIMEOUT=30s"));
  ASSERT_TRUE(job.wait_for("rank 3 step 50", 1, 30s)) << job.output();
  ::kill(job.rank_pids().at(2), SIGKILL);
  ASSERT_TRUE(job.wait_for(R"(rank [013] failed )", 3, 10s)) << job.output();
  expect_survivors_name(job, backend(), "rank 2 (");
  auto status = job.finish(20s);
  ASSERT_TRUE(status) << job.output();
  expect_every_rank_gone(job, 5s);
  expect_no_false_success(job);
}

// SIGSTOP of a rank: nothing breaks, the peer just stops answering. The survivors fail within
// KOLO_OP_TIMEOUT naming it; kolorun then stops the job, SIGKILL included for the stopped rank.
TEST_P(OneNode, AFrozenRankFailsTheOthersWithinTheOpTimeout) {
  Launch job(kolorun_job(3, backend_env() + " KOLO_OP_TIMEOUT=3s"));
  ASSERT_TRUE(job.wait_for("rank 2 step 50", 1, 30s)) << job.output();
  const auto stopped = Clock::now();
  ::kill(job.rank_pids().at(1), SIGSTOP);
  auto failed = job.wait_for(R"(rank [02] failed .*rank 1)", 1, 20s);
  ASSERT_TRUE(failed) << job.output();
  expect_within("rank SIGSTOPped (" + backend() + ", op timeout 3s): a survivor fails",
                *failed - stopped, 3.0 + 3.0, job);
  auto status = job.finish(20s);
  ASSERT_TRUE(status) << job.output();
  EXPECT_EQ(exit_code(*status), 3) << job.output();  // the first rank to fail exits 3
  expect_within("rank SIGSTOPped (" + backend() + "): kolorun exits after the failure",
                job.ended() - *failed, 1.0 /* grace */ + 3.0, job);
  expect_every_rank_gone(job, 5s);
  expect_no_false_success(job);
}

// SIGSTOP of rank 2 of 4: every survivor's first cause names rank 2. Nothing breaks; each
// survivor times out on the link it waited on, often a live rank's (in the control plane's ring
// rank 0 waits on rank 3, which waits on rank 2), and used to name that rank. The failure board
// names the one rank that recorded no failure (coordinator/failure_board.h).
TEST_P(OneNode, EverySurvivorNamesTheFrozenRank) {
  Launch job(kolorun_job(4, backend_env() + " FAULT_SURVIVE_SIGTERM=1 KOLO_OP_TIMEOUT=3s"));
  ASSERT_TRUE(job.wait_for("rank 3 step 50", 1, 30s)) << job.output();
  ::kill(job.rank_pids().at(2), SIGSTOP);
  ASSERT_TRUE(job.wait_for(R"(rank [013] failed )", 3, 20s)) << job.output();
  expect_survivors_name(job, backend(), "first failure: rank 2 stopped answering");
  auto status = job.finish(20s);
  ASSERT_TRUE(status) << job.output();
  expect_every_rank_gone(job, 5s);
  expect_no_false_success(job);
}

// SIGKILL of a rank that started a helper (system("sleep 600 &")): the helper must hold none
// of the rank's connections (they used to be inherited: tcp's sockets were not close-on-exec,
// so the survivors saw no end of stream and waited out the 30 s op timeout), and it must not
// outlive the job (kolorun used to signal only the process groups of ranks still alive).
TEST_P(OneNode, ARankKilledWhileItsHelperRunsFailsTheOthersAtOnceAndLeavesNothing) {
  Launch job(kolorun_job(3, backend_env() + " FAULT_SURVIVE_SIGTERM=1 KOLO_OP_TIMEOUT=30s " +
                                "FAULT_HELPER='sleep 600 & echo helper pid $!'"));
  ASSERT_TRUE(job.wait_for("rank 2 step 50", 1, 30s)) << job.output();
  std::smatch m;
  const std::string out = job.output();
  ASSERT_TRUE(std::regex_search(out, m, std::regex(R"(helper pid (\d+))"))) << out;
  const pid_t helper = std::stoi(m[1]);
  const auto killed = Clock::now();
  ::kill(job.rank_pids().at(1), SIGKILL);
  auto failed = job.wait_for(R"(rank [02] failed .*PeerFailure: .*rank [12])", 2, 40s);
  ASSERT_TRUE(failed) << job.output();
  expect_within("rank with a helper SIGKILLed (" + backend() + "): survivors fail",
                *failed - killed, 5.0, job);
  auto status = job.finish(20s);
  ASSERT_TRUE(status) << job.output();
  EXPECT_TRUE(ends_by(helper, Clock::now() + 5s)) << "the helper (pid " << helper << ") was left";
  if (!has_ended(helper)) ::kill(helper, SIGKILL);
  expect_every_rank_gone(job, 5s);
  expect_no_false_success(job);
}

// SIGKILL of kolorun: it can forward nothing, yet every rank dies with it (PR_SET_PDEATHSIG).
// On shm, the ranks' segments go with them.
TEST(Faults, KillingKolorunEndsEveryRank) {
  Launch job(kolorun_job(2, "KOLO_CPU_OPERATIONS=shm"));
  const uint64_t since = kolo::testing::start_ticks(job.pid());
  ASSERT_TRUE(job.wait_for("rank 1 step 50", 1, 30s)) << job.output();
  // The check below can see a segment: both ranks map one while they run.
  EXPECT_EQ(kolo::testing::processes_mapping(kShmSegment, since).size(), 2u);
  job.signal(SIGKILL);
  auto status = job.finish(10s);
  ASSERT_TRUE(status);
  EXPECT_EQ(exit_code(*status), 128 + SIGKILL);
  expect_every_rank_gone(job, 5s);
  expect_no_shm_segment_left(since);
  expect_no_false_success(job);
}

// SIGSTOP of kolorun pauses only its output: after SIGCONT the job completes, every rank
// computing every step right.
TEST(Faults, StoppingKolorunLosesNothing) {
  Launch job("exec " + kKolorun + " -np 2 " + kWorker + " 1500");
  ASSERT_TRUE(job.wait_for("rank 1 step 50", 1, 30s)) << job.output();
  job.signal(SIGSTOP);
  std::this_thread::sleep_for(2s);
  job.signal(SIGCONT);
  auto status = job.finish(60s);
  ASSERT_TRUE(status) << job.output();
  EXPECT_EQ(exit_code(*status), 0) << job.output();
  EXPECT_NE(job.output().find("rank 0 done"), std::string::npos) << job.output();
  EXPECT_NE(job.output().find("rank 1 done"), std::string::npos) << job.output();
  EXPECT_EQ(job.output().find("WRONG RESULT"), std::string::npos) << job.output();
}

// ---- Two nodes on localhost, one kolorun each -------------------------------------------------

std::string node_job(int node, const std::string& rdzv, const std::string& env = "") {
  return "KOLO_SECRET=faults " + env + " exec " + kKolorun + " --nnodes 2 --node-rank " +
         std::to_string(node) + " --rdzv " + rdzv + " --grace 1s -np 2 " + kWorker + " 0";
}

// A rank of node 1 killed: node 1's kolorun reports it, node 0's hears of it through the store
// and stops its ranks; both exit within seconds.
TEST(Faults, TwoNodesARankKilledEndsBothNodes) {
  const std::string rdzv = "127.0.0.1:" + std::to_string(free_port());
  Launch n0(node_job(0, rdzv)), n1(node_job(1, rdzv));
  ASSERT_TRUE(n1.wait_for("rank 3 step 50", 1, 30s)) << n0.output() << n1.output();
  const auto killed = Clock::now();
  ::kill(n1.rank_pids().at(3), SIGKILL);
  auto s1 = n1.finish(20s);
  auto s0 = n0.finish(20s);
  ASSERT_TRUE(s0 && s1) << n0.output() << n1.output();
  EXPECT_EQ(exit_code(*s1), 128 + SIGKILL) << n1.output();
  EXPECT_NE(exit_code(*s0), 0) << n0.output();
  expect_within("two nodes, rank SIGKILLed: node 0's kolorun exits", n0.ended() - killed, 1.0 + 5.0,
                n0);
  expect_within("two nodes, rank SIGKILLed: node 1's kolorun exits", n1.ended() - killed, 1.0 + 5.0,
                n1);
  EXPECT_NE(n1.output().find("kolorun: rank 3 (pid"), std::string::npos) << n1.output();
  expect_every_rank_gone(n0, 5s);
  expect_every_rank_gone(n1, 5s);
  expect_no_false_success(n0);
  expect_no_false_success(n1);
}

// Node 0's kolorun, which serves the store, killed mid-training: its ranks die with it; node 1's
// ranks fail naming a peer of node 0, and node 1's kolorun exits within seconds (not --timeout).
TEST(Faults, TwoNodesNodeZeroKilledEndsNodeOneWithinSeconds) {
  const std::string rdzv = "127.0.0.1:" + std::to_string(free_port());
  Launch n0(node_job(0, rdzv)), n1(node_job(1, rdzv, "FAULT_SURVIVE_SIGTERM=1"));
  ASSERT_TRUE(n1.wait_for("rank 3 step 50", 1, 30s)) << n0.output() << n1.output();
  const auto killed = Clock::now();
  n0.signal(SIGKILL);
  auto failed = n1.wait_for(R"(rank [23] failed .*rank [01])", 1, 10s);
  EXPECT_TRUE(failed) << n1.output();
  auto s1 = n1.finish(20s);
  ASSERT_TRUE(s1) << n1.output();
  EXPECT_EQ(exit_code(*s1), 3) << n1.output();
  expect_within("two nodes, node 0's kolorun SIGKILLed: node 1's kolorun exits",
                n1.ended() - killed, 1.0 + 5.0, n1);
  n0.finish(5s);
  expect_every_rank_gone(n0, 5s);
  expect_every_rank_gone(n1, 5s);
  expect_no_false_success(n1);
}

// The store's host dies during the rendezvous: a node waiting there fails at once naming it.
TEST(Faults, TheStoreDyingDuringRendezvousFailsTheWaitingNode) {
  const std::string rdzv = "127.0.0.1:" + std::to_string(free_port());
  auto node = [&](int k) {
    return "KOLO_SECRET=faults exec " + kKolorun + " --nnodes 3 --node-rank " + std::to_string(k) +
           " --rdzv " + rdzv + " --timeout 60s -np 1 " + kWorker + " 0";
  };
  Launch n0(node(0)), n1(node(1));
  std::this_thread::sleep_for(1s);  // both are in the gathering, waiting for node 2
  const auto killed = Clock::now();
  n0.signal(SIGKILL);
  auto s1 = n1.finish(20s);
  ASSERT_TRUE(s1) << n1.output();
  EXPECT_EQ(exit_code(*s1), 1) << n1.output();
  expect_within("store killed during rendezvous: waiting node exits", n1.ended() - killed, 5.0, n1);
  EXPECT_NE(n1.output().find(rdzv), std::string::npos) << n1.output();
  EXPECT_EQ(n1.output().find("ready"), std::string::npos) << n1.output();
}

// ---- mpirun
// ---------------------------------------------------------------------------------------
#ifdef KOLO_TEST_MPIRUN
// A job of three fault_worker ranks under mpirun (the mpi backend), with `env` exported to them.
std::string mpirun_job(const std::string& env = "") {
  return "OMPI_MCA_btl_vader_single_copy_mechanism=none " + env + " exec " +
         std::string(KOLO_TEST_MPIRUN) + " --allow-run-as-root --oversubscribe -np 3 " + kWorker +
         " 0";
}

// SIGKILL of a rank under mpirun with the mpi backend: Open MPI ends the job; nothing is left.
TEST(Faults, MpirunARankKilledEndsTheJob) {
  Launch job(mpirun_job());
  ASSERT_TRUE(job.wait_for("rank 2 step 50", 1, 30s)) << job.output();
  const auto killed = Clock::now();
  ::kill(job.rank_pids().at(1), SIGKILL);
  auto status = job.finish(30s);
  ASSERT_TRUE(status) << job.output();
  EXPECT_NE(exit_code(*status), 0) << job.output();
  expect_within("rank SIGKILLed (mpirun, mpi): mpirun exits", job.ended() - killed, 10.0, job);
  expect_every_rank_gone(job, 5s);
  expect_no_false_success(job);
}

// SIGSTOP of a rank under mpirun: Open MPI sees nothing wrong, the peer just stops answering.
// The mpi backend polls its nonblocking collectives against KOLO_OP_TIMEOUT: each survivor
// prints an error naming the operation and the timeout, then ends the job with MPI_Abort (a
// collective in flight cannot be cancelled, so no rank returns to its caller); mpirun exits
// with the abort's code 62 and takes every rank with it, the stopped one included.
TEST(Faults, MpirunAFrozenRankEndsTheJobWithinTheOpTimeout) {
  Launch job(mpirun_job("KOLO_OP_TIMEOUT=3s"));
  ASSERT_TRUE(job.wait_for("rank 2 step 50", 1, 30s)) << job.output();
  const auto stopped = Clock::now();
  ::kill(job.rank_pids().at(1), SIGSTOP);
  for (int survivor : {0, 2}) {
    // "... rank 0 of 3: did not complete within 3.0 s (KOLO_OP_TIMEOUT): a rank of the
    // communicator is frozen ..."
    auto failed = job.wait_for("\\[kolo E rank " + std::to_string(survivor) + " .*rank " +
                                   std::to_string(survivor) +
                                   " of 3: did not complete within 3\\.0 s \\(KOLO_OP_TIMEOUT\\)",
                               1, 20s);
    ASSERT_TRUE(failed) << "rank " << survivor << "\n" << job.output();
    expect_within("rank SIGSTOPped (mpirun, mpi, op timeout 3 s): rank " +
                      std::to_string(survivor) + " reports the timeout",
                  *failed - stopped, 3.0 + 3.0, job);
  }
  auto status = job.finish(30s);
  ASSERT_TRUE(status) << job.output();
  EXPECT_EQ(exit_code(*status), 62) << job.output();
  expect_within("rank SIGSTOPped (mpirun, mpi, op timeout 3 s): mpirun exits",
                job.ended() - stopped, 3.0 + 1.0 /* abort grace */ + 5.0, job);
  expect_every_rank_gone(job, 5s);
  expect_no_false_success(job);
}
#endif

// ---- Network namespaces ---------------------------------------------------------------------

using kolo::testing::TwoNamespaces;  // tests/support/two_namespaces.h

// ---- Two network namespaces, the link taken down --------------------------------------------

// Two nodes of one rank each in their own network namespace; the veth link goes down
// mid-training, so nothing breaks, packets just vanish. Both ranks fail within the op timeout
// naming the other; both launchers exit. Needs root (CAP_SYS_ADMIN); skips otherwise.
TEST(Faults, ALinkDownMidTrainingFailsBothNodesWithinTheOpTimeout) {
  using kolo::testing::run_command;
  TwoNamespaces namespaces("kf");
  if (!namespaces.ok()) GTEST_SKIP() << namespaces.why();
  const std::string& ns = namespaces.name();
  const std::string a = namespaces.a(), b = namespaces.b();
  auto link = namespaces.link("10.232.0");
  ASSERT_EQ(link.exit_code, 0) << link.output;
  {
    auto node = [&](int k) {
      const std::string host = "10.232.0." + std::to_string(k + 1);
      return (k == 0 ? a : b) +
             "env KOLO_SECRET=faults FAULT_SURVIVE_SIGTERM=1 KOLO_OP_TIMEOUT=3s KOLO_TCP_HOST=" +
             host + " " + kKolorun + " --nnodes 2 --node-rank " + std::to_string(k) +
             " --rdzv 10.232.0.1:29741 --grace 1s -np 1 " + kWorker + " 0";
    };
    Launch n0(node(0)), n1(node(1));
    ASSERT_TRUE(n1.wait_for("rank 1 step 50", 1, 30s)) << n0.output() << n1.output();
    const auto down = Clock::now();
    ASSERT_EQ(run_command(a + "ip link set " + ns + "x down").exit_code, 0);
    auto f0 = n0.wait_for(R"(rank 0 failed .*rank 1)", 1, 20s);
    auto f1 = n1.wait_for(R"(rank 1 failed .*rank 0)", 1, 20s);
    ASSERT_TRUE(f0 && f1) << n0.output() << n1.output();
    expect_within("link down (op timeout 3s): node 0's rank fails", *f0 - down, 3.0 + 3.0, n0);
    expect_within("link down (op timeout 3s): node 1's rank fails", *f1 - down, 3.0 + 3.0, n1);
    // Node 1 cannot reach node 0's store any more: its kolorun must not wait --timeout for it.
    auto s0 = n0.finish(20s), s1 = n1.finish(20s);
    ASSERT_TRUE(s0 && s1) << n0.output() << n1.output();
    expect_within("link down: node 1's kolorun exits after its rank failed", n1.ended() - *f1,
                  1.0 + 6.0, n1);
    expect_no_false_success(n0);
    expect_no_false_success(n1);
  }
}

// ---- An attacker on the path (issue 16) --------------------------------------------------

// Starts tun_relay in `mode` and joins namespaces <ns>a and <ns>b through it (10.233.0.1 and
// .2); null when it could not.
std::unique_ptr<Launch> start_relay(const TwoNamespaces& namespaces, const std::string& mode) {
  const std::string& ns = namespaces.name();
  using kolo::testing::run_command;
  auto relay = std::make_unique<Launch>(std::string(KOLO_TEST_TUN_RELAY) + " " + ns + "x " + ns +
                                        "y " + mode);
  if (!relay->wait_for("^ready", 1, 10s)) return nullptr;
  auto link = run_command("ip link set " + ns + "x netns " + ns + "a && ip link set " + ns +
                          "y netns " + ns + "b && " + namespaces.address_and_up("10.233.0"));
  if (link.exit_code != 0) return nullptr;
  return relay;
}

// Node k (one rank) of a two-node job across the relay: 200 steps, tcp.
std::string relayed_node(const std::string& ns, int k, bool integrity, int port) {
  const std::string host = "10.233.0." + std::to_string(k + 1);
  return "ip netns exec " + ns + (k == 0 ? "a" : "b") +
         " env KOLO_SECRET=faults KOLO_OP_TIMEOUT=5s KOLO_TCP_INTEGRITY=" +
         (integrity ? "1" : "0") + " KOLO_TCP_HOST=" + host + " " + kKolorun +
         " --nnodes 2 --node-rank " + std::to_string(k) +
         " --rdzv 10.233.0.1:" + std::to_string(port) + " --grace 1s -np 1 " + kWorker + " 200";
}

// Two nodes of one rank each in their own network namespace, linked only through tun_relay, an
// attacker on the path that flips a bit in the tcp backend's data frames after the handshake
// (it changes no address, so the handshake's channel binding passes). Without
// KOLO_TCP_INTEGRITY the ranks compute with the altered data (fault_worker reports the wrong
// result); with it, a rank fails at the first altered frame naming the peer and "integrity",
// and the other names that failure. Needs root (network namespaces, TUN); skips otherwise.
TEST(Faults, ARelayFlippingBitsInDataFramesIsCaughtByTcpIntegrity) {
  using kolo::testing::run_command;
  TwoNamespaces namespaces("ki");
  if (!namespaces.ok()) GTEST_SKIP() << namespaces.why();
  const std::string& ns = namespaces.name();
  for (bool integrity : {false, true}) {
    SCOPED_TRACE(integrity ? "KOLO_TCP_INTEGRITY=1" : "KOLO_TCP_INTEGRITY=0");
    // The data plane's frames of fault_worker's 512-byte allreduce; the control plane's are
    // smaller, so that the attack changes numbers rather than stopping the negotiation.
    std::unique_ptr<Launch> relay = start_relay(namespaces, "frames 256 512");
    ASSERT_TRUE(relay) << "the relay did not start";
    const int port = integrity ? 29744 : 29743;
    Launch n0(relayed_node(ns, 0, integrity, port)), n1(relayed_node(ns, 1, integrity, port));
    auto s0 = n0.finish(60s), s1 = n1.finish(60s);
    ASSERT_TRUE(s0 && s1) << n0.output() << n1.output();
    const std::string out = n0.output() + n1.output();
    EXPECT_TRUE(relay->wait_for("^flipped", 1, 1s)) << "the relay altered nothing\n" << out;
    EXPECT_EQ(out.find(" done"), std::string::npos) << out;  // no rank may succeed
    if (integrity) {
      EXPECT_EQ(out.find("WRONG RESULT"), std::string::npos) << out;
      const std::regex caught(R"(rank [01] failed [^\n]*integrity check failed on frame \d+ )"
                              R"([^\n]*from rank [01] \(10\.233\.0\.[12]:)");
      EXPECT_TRUE(std::regex_search(out, caught)) << out;
      std::printf("[fault] relay flipping bits, KOLO_TCP_INTEGRITY=1:\n%s", out.c_str());
    } else {
      EXPECT_NE(out.find("WRONG RESULT"), std::string::npos) << out;
      std::printf("[fault] relay flipping bits, KOLO_TCP_INTEGRITY=0:\n%s", out.c_str());
    }
    // The TUN devices vanish with the relay.
  }
}

// The same-host offer travels over TCP after the handshake; an attacker on the path who turns
// "no offer" into an offer of its own AF_UNIX socket (to receive the data off the path, or to
// pick the transport) is refused: the offer is sealed under the connection's session key, so
// the rank that reads it fails init naming the offer, and no rank starts training.
TEST(Faults, AFakedSameHostOfferIsRefused) {
  using kolo::testing::run_command;
  TwoNamespaces namespaces("ko");
  if (!namespaces.ok()) GTEST_SKIP() << namespaces.why();
  const std::string& ns = namespaces.name();
  {
    std::unique_ptr<Launch> relay = start_relay(namespaces, "offer");
    ASSERT_TRUE(relay) << "the relay did not start";
    Launch n0(relayed_node(ns, 0, false, 29745)), n1(relayed_node(ns, 1, false, 29745));
    auto s0 = n0.finish(60s), s1 = n1.finish(60s);
    ASSERT_TRUE(s0 && s1) << n0.output() << n1.output();
    const std::string out = n0.output() + n1.output();
    EXPECT_TRUE(relay->wait_for("^flipped", 1, 1s)) << "the relay altered nothing\n" << out;
    EXPECT_NE(out.find("the same-host offer of rank 0 (10.233.0.1:"), std::string::npos) << out;
    EXPECT_NE(out.find("failed its MAC"), std::string::npos) << out;
    EXPECT_EQ(out.find(" step "), std::string::npos) << out;
    EXPECT_EQ(out.find(" done"), std::string::npos) << out;
  }
}

}  // namespace
}  // namespace kolo::faults
