// The hierarchical allreduce (backends/hierarchical) in real multi-process jobs: several
// "hosts" of kolorun on this machine (one kolorun per node, --nnodes/--node-rank, so that each
// rank's KOLO_LOCAL_* and KOLO_CROSS_* describe the simulated host), and two hosts in network
// namespaces joined by a veth pair, where the ranks of different hosts reach each other only
// through the veth addresses. Checked at the backend level (every collective, dtype and op of
// collective_checks.h on the composite) and through the coordinator (hierarchical_worker:
// exact closed forms, and a digest of every result equal to a flat run's).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "rendezvous/tcp_store.h"
#include "tests/support/run_command.h"
#include "tests/support/two_namespaces.h"

namespace {

using kolo::testing::count_occurrences;
using kolo::testing::ProcessRun;
using kolo::testing::run_command;

const std::string kKolorun = KOLO_TEST_KOLORUN;
const std::string kCollectives = KOLO_TEST_COLLECTIVES_WORKER;
const std::string kWorker = KOLO_TEST_HIERARCHICAL_WORKER;

int free_port() {
  return kolo::TcpStoreServer::start("127.0.0.1", 0, "port-finder").value()->port();
}

// A shell line that starts one kolorun per node of an `nnodes` x `np` job on this machine,
// each running `command` with `env`, and prints "node exits E0 E1 ..." once all have ended.
std::string nodes(int nnodes, int np, const std::string& env, const std::string& command) {
  const std::string job = "env " + env + " " + kKolorun + " --nnodes " + std::to_string(nnodes) +
                          " --rdzv 127.0.0.1:" + std::to_string(free_port()) +
                          " --secret hier -np " + std::to_string(np) + " --node-rank ";
  std::string script, exits = "echo \"node exits";
  for (int k = 0; k < nnodes; ++k) {
    script += job + std::to_string(k) + " " + command + " & p" + std::to_string(k) + "=$!; ";
    exits += " $e" + std::to_string(k);
  }
  for (int k = 0; k < nnodes; ++k)
    script += "wait $p" + std::to_string(k) + "; e" + std::to_string(k) + "=$?; ";
  return script + exits + "\"";
}

std::string zeros(int n) {
  std::string out = "node exits";
  for (int k = 0; k < n; ++k) out += " 0";
  return out;
}

// Every collective on the composite, exact, for every dtype and op; counts 0, 1, P - 1, P + 1
// and beyond several shm chunks and the ring threshold (4 KiB chunks, 1 KiB one-round and
// recursive-doubling thresholds), so that shards are uneven and every stage changes algorithm.
struct Shape {
  int nnodes, np;
  const char* intra;
};
class Grid : public ::testing::TestWithParam<Shape> {};

TEST_P(Grid, EveryCollectiveExact) {
  const Shape s = GetParam();
  const int P = s.nnodes * s.np;
  const std::string counts =
      "0,1," + std::to_string(P - 1) + "," + std::to_string(P + 1) + ",1031,3001,40009";
  ProcessRun r = run_command(
      nodes(s.nnodes, s.np,
            "KOLO_SHM_CHUNK=4KiB KOLO_SHM_THRESHOLD=1KiB KOLO_RING_THRESHOLD=1KiB "
            "KOLO_RING_SEGMENT=2KiB",
            kCollectives + " --backend tcp --hierarchical " + s.intra + " --counts " + counts),
      100);
  EXPECT_NE(r.output.find(zeros(s.nnodes)), std::string::npos) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "(hierarchical " + std::string(s.intra) + "/tcp): "), P)
      << r.output;
  EXPECT_EQ(count_occurrences(r.output, "checks passed"), P) << r.output;
}
INSTANTIATE_TEST_SUITE_P(Hosts, Grid,
                         ::testing::Values(Shape{2, 2, "shm"}, Shape{2, 3, "shm"},
                                           Shape{3, 2, "shm"}, Shape{2, 2, "tcp"}),
                         [](const auto& info) {
                           return std::to_string(info.param.nnodes) + "x" +
                                  std::to_string(info.param.np) + "_" + info.param.intra;
                         });

// Hosts whose ranks interleave (host = rank % hosts, as mpirun's round-robin layout numbers
// them): the cross groups' order is not the hosts' order, and every host's block is scattered
// over the output, so the hierarchical allgather's unpack takes the general path. One kolorun;
// each rank rewrites its own host and position before the worker starts.
TEST(InterleavedHosts, EveryCollectiveExact) {
  for (int hosts : {2, 3}) {
    // \$ reaches each rank's sh, which expands it (run_command's bash only unescapes it).
    const std::string place = "export KOLO_CROSS_RANK=\\$((KOLO_RANK % " + std::to_string(hosts) +
                              ")) KOLO_CROSS_SIZE=" + std::to_string(hosts) +
                              " KOLO_LOCAL_RANK=\\$((KOLO_RANK / " + std::to_string(hosts) +
                              ")) KOLO_LOCAL_SIZE=2; ";
    const int P = 2 * hosts;
    ProcessRun r =
        run_command("KOLO_SHM_CHUNK=4KiB KOLO_SHM_THRESHOLD=1KiB " + kKolorun + " -np " +
                        std::to_string(P) + " sh -c \"" + place + "exec " + kCollectives +
                        " --backend tcp --hierarchical shm --counts 0,1,5,1031,3001\"",
                    100);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(count_occurrences(r.output, "(hierarchical shm/tcp): "), P) << r.output;
    EXPECT_EQ(count_occurrences(r.output, "checks passed"), P) << r.output;
  }
}

#ifdef KOLO_TEST_MPIRUN
// mpi at both levels (its subgroup factory: MPI_Comm_create_group for the host and for the
// position), on two simulated hosts of two ranks: mpirun starts the ranks, and each reads a
// kolorun-style environment that places ranks 0, 1 on host 0 and 2, 3 on host 1 (mpirun on one
// machine would put all four on one host, where the hierarchy is the flat backend).
TEST(Mpirun, EveryCollectiveExactWithMpiAtBothLevels) {
  auto server = kolo::TcpStoreServer::start("127.0.0.1", 0, "s3cret");
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  const std::string rank = "\\$OMPI_COMM_WORLD_RANK";  // expanded by each rank's bash
  ProcessRun r =
      run_command("OMPI_MCA_btl_vader_single_copy_mechanism=none " + std::string(KOLO_TEST_MPIRUN) +
                      " --allow-run-as-root --oversubscribe -np 4 bash -c \"KOLO_RANK=" + rank +
                      " KOLO_SIZE=4 KOLO_LOCAL_RANK=\\$((" + rank +
                      " % 2)) KOLO_LOCAL_SIZE=2 "
                      "KOLO_CROSS_RANK=\\$((" +
                      rank + " / 2)) KOLO_CROSS_SIZE=2 KOLO_STORE_ADDR=" + (*server)->address() +
                      " KOLO_SECRET=s3cret exec " + kCollectives +
                      " --backend mpi --hierarchical mpi --counts 0,1,3,5,1031\"",
                  100);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "(hierarchical mpi/mpi): "), 4) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "checks passed"), 4) << r.output;
}
#endif

// The digest lines of a hierarchical_worker job, by rank.
std::map<std::string, std::string> digests(const std::string& output) {
  std::map<std::string, std::string> out;
  const std::regex line("rank (\\d+): digest ([0-9a-f]+)");
  for (std::sregex_iterator it(output.begin(), output.end(), line), end; it != end; ++it)
    out[(*it)[1]] = (*it)[2];
  return out;
}

// Two hierarchical_worker jobs of two hosts of two ranks, `flat` with the knobs off and `hier`
// with one or both on: both passed, only `hier` built the hierarchy (its info line begins with
// `label`), its allgathers went through it when `gathers` (KOLO_HIERARCHICAL_ALLGATHER=1), and
// the results are equal.
void expect_hierarchy_equals_flat(const ProcessRun& flat, const ProcessRun& hier,
                                  const std::string& label = "hierarchical allreduce",
                                  bool gathers = false) {
  for (const ProcessRun* r : {&flat, &hier}) {
    EXPECT_NE(r->output.find(zeros(2)), std::string::npos) << r->output;
    EXPECT_EQ(count_occurrences(r->output, "hierarchical worker passed"), 4) << r->output;
  }
  EXPECT_EQ(count_occurrences(flat.output, "hierarchical allreduce: "), 0) << flat.output;
  EXPECT_EQ(count_occurrences(flat.output, "hierarchical allgather: "), 0) << flat.output;
  // The allgathers took the hierarchy exactly when its knob was set.
  EXPECT_EQ(count_occurrences(hier.output, "hierarchical allgather: in use"), gathers ? 4 : 0)
      << hier.output;
  EXPECT_EQ(
      count_occurrences(hier.output, label + ": 2 hosts of 2 ranks, shm within a host, tcp across"),
      4)
      << hier.output;
  EXPECT_EQ(digests(flat.output).size(), 4u) << flat.output;
  EXPECT_EQ(digests(hier.output), digests(flat.output)) << hier.output;
}

// Through the coordinator on two simulated hosts of two ranks: the hierarchical job's results
// are the flat job's, byte for byte, and the hierarchy was really used (its info line).
TEST(Coordinator, TwoHostsOfTwoEqualTheFlatResult) {
  ProcessRun flat = run_command(nodes(2, 2, "KOLO_LOG_LEVEL=info", kWorker), 100);
  ProcessRun hier =
      run_command(nodes(2, 2, "KOLO_LOG_LEVEL=info KOLO_HIERARCHICAL_ALLREDUCE=1", kWorker), 100);
  expect_hierarchy_equals_flat(flat, hier);
  ProcessRun gather =
      run_command(nodes(2, 2, "KOLO_LOG_LEVEL=info KOLO_HIERARCHICAL_ALLGATHER=1", kWorker), 100);
  expect_hierarchy_equals_flat(flat, gather, "hierarchical allgather", /*gathers=*/true);
}

// One host, or one rank per host: the hierarchy is the flat backend, said once per rank.
TEST(Coordinator, OneHostAndOneRankPerHostStayFlat) {
  ProcessRun one_host = run_command(
      "KOLO_LOG_LEVEL=info KOLO_HIERARCHICAL_ALLREDUCE=1 " + kKolorun + " -np 3 " + kWorker, 60);
  EXPECT_EQ(one_host.exit_code, 0) << one_host.output;
  EXPECT_EQ(count_occurrences(one_host.output, "hierarchical worker passed"), 3) << one_host.output;
  EXPECT_EQ(count_occurrences(one_host.output,
                              "hierarchical allreduce: one host, so the flat shm backend is "
                              "the hierarchy"),
            3)
      << one_host.output;
  ProcessRun one_each =
      run_command(nodes(2, 1, "KOLO_LOG_LEVEL=info KOLO_HIERARCHICAL_ALLREDUCE=1", kWorker), 60);
  EXPECT_NE(one_each.output.find(zeros(2)), std::string::npos) << one_each.output;
  EXPECT_EQ(count_occurrences(one_each.output, "hierarchical worker passed"), 2) << one_each.output;
  EXPECT_EQ(count_occurrences(one_each.output,
                              "hierarchical allreduce: one rank per host, so the flat tcp "
                              "backend is the hierarchy"),
            2)
      << one_each.output;
}

// Where a rank started by hand runs: KOLO_LOCAL_* and KOLO_CROSS_* as a launcher would set them.
struct Place {
  int local_rank, local_size, cross_rank, cross_size;
};

// A shell line that starts one process per place (rank = index) running `command` with `env`
// against `server`, and prints "rank R exit E" for each once all have ended. No launcher
// supervises them, so a failing rank does not end the others: each must end on its own.
std::string by_hand(const kolo::TcpStoreServer& server, const std::vector<Place>& places,
                    const std::string& env, const std::string& command) {
  const std::string size = std::to_string(places.size());
  std::string script;
  for (size_t r = 0; r < places.size(); ++r) {
    const Place& p = places[r];
    script += env + " KOLO_RANK=" + std::to_string(r) + " KOLO_SIZE=" + size +
              " KOLO_LOCAL_RANK=" + std::to_string(p.local_rank) +
              " KOLO_LOCAL_SIZE=" + std::to_string(p.local_size) +
              " KOLO_CROSS_RANK=" + std::to_string(p.cross_rank) +
              " KOLO_CROSS_SIZE=" + std::to_string(p.cross_size) +
              " KOLO_STORE_ADDR=" + server.address() + " KOLO_SECRET=s3cret " + command + " & p" +
              std::to_string(r) + "=$!; ";
  }
  for (size_t r = 0; r < places.size(); ++r)
    script += "wait $p" + std::to_string(r) + "; echo \"rank " + std::to_string(r) + " exit $?\"; ";
  return script;
}

// 2 + 1 ranks on two hosts (as a launcher that places ranks unevenly would): with the knob
// set, every rank's init fails naming each host's ranks.
TEST(Coordinator, UnequalHostsFailInitNamingThem) {
  // Each knob alone names itself; with both, the allreduce's is named.
  for (const std::string knob : {"KOLO_HIERARCHICAL_ALLREDUCE", "KOLO_HIERARCHICAL_ALLGATHER"}) {
    auto server = kolo::TcpStoreServer::start("127.0.0.1", 0, "s3cret");
    ASSERT_TRUE(server.ok()) << server.status().to_string();
    ProcessRun r = run_command(
        by_hand(**server, {{0, 2, 0, 2}, {1, 2, 0, 2}, {0, 1, 1, 2}}, knob + "=1", kWorker), 60);
    for (int rank = 0; rank < 3; ++rank)
      EXPECT_NE(r.output.find("rank " + std::to_string(rank) + " exit 1"), std::string::npos)
          << r.output;
    EXPECT_EQ(count_occurrences(r.output, "init: InvalidArgument: " + knob +
                                              "=1: hosts hold different numbers of ranks: host 0 "
                                              "has 2 (ranks 0, 1), host 1 has 1 (rank 2)"),
              3)
        << r.output;
  }
}

// Two hosts of two ranks; rank 1 SIGKILLs itself while every rank loops over 32 MiB
// hierarchical allreduces: every survivor fails (its own host's rank through shm's pidfd, the
// other host's through the cross-host connections), none hangs.
TEST(Faults, ARankKilledMidAllreduceFailsEveryOther) {
  auto server = kolo::TcpStoreServer::start("127.0.0.1", 0, "s3cret");
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  ProcessRun r =
      run_command(by_hand(**server, {{0, 2, 0, 2}, {1, 2, 0, 2}, {0, 2, 1, 2}, {1, 2, 1, 2}}, "",
                          kCollectives + " --backend tcp --hierarchical shm --mode kill"),
                  60);
  EXPECT_NE(r.output.find("rank 1 exit 137"), std::string::npos) << r.output;  // SIGKILL
  for (int rank : {0, 2, 3})
    EXPECT_NE(r.output.find("rank " + std::to_string(rank) + " exit 3"), std::string::npos)
        << r.output;
  // Which stage fails, and so which peer each survivor names, depends on timing (a survivor
  // may first lose a peer that failed after the dead rank); every error names its stage and
  // maps its group's ranks to the job's.
  EXPECT_EQ(count_occurrences(r.output, "allreduce failed after"), 3) << r.output;
  EXPECT_EQ(count_occurrences(r.output, ": PeerFailure: hierarchical allreduce, "), 3) << r.output;
  EXPECT_EQ(count_occurrences(r.output, ", whose ranks 0, 1 are ranks "), 3) << r.output;
}

// A value that is not a boolean: refused by init (naming the variable) and, as a flag, by
// kolorun before any rank starts.
TEST(Coordinator, ABadValueIsRefusedNamingTheVariable) {
  ProcessRun init = run_command("KOLO_HIERARCHICAL_ALLREDUCE=maybe " + kWorker, 20);
  EXPECT_EQ(init.exit_code, 1) << init.output;
  EXPECT_NE(init.output.find("init: InvalidArgument: KOLO_HIERARCHICAL_ALLREDUCE=maybe is "
                             "invalid: expected 1/true/yes/on or 0/false/no/off"),
            std::string::npos)
      << init.output;
  ProcessRun flag = run_command(kKolorun + " --hierarchical-allreduce=maybe -np 2 " + kWorker, 20);
  EXPECT_NE(flag.exit_code, 0) << flag.output;
  EXPECT_NE(flag.output.find("--hierarchical-allreduce maybe is invalid"), std::string::npos)
      << flag.output;
  EXPECT_EQ(count_occurrences(flag.output, "hierarchical worker passed"), 0) << flag.output;
}

// The test: two hosts in network namespaces joined by a veth pair, two ranks in each
// (shm within a namespace, tcp across the veth). The hierarchical job's results equal the flat
// job's byte for byte.
TEST(NetworkNamespaces, TwoHostsOfTwoEqualTheFlatResult) {
  kolo::testing::TwoNamespaces namespaces("kolh");
  if (!namespaces.ok()) GTEST_SKIP() << namespaces.why();
  ProcessRun link = namespaces.link("10.234.0");
  ASSERT_EQ(link.exit_code, 0) << link.output;
  std::map<std::string, ProcessRun> runs;
  // Flat, the hierarchical allreduce, and both collectives hierarchical.
  for (const char* knobs : {"KOLO_HIERARCHICAL_ALLREDUCE=0", "KOLO_HIERARCHICAL_ALLREDUCE=1",
                            "KOLO_HIERARCHICAL_ALLREDUCE=1 KOLO_HIERARCHICAL_ALLGATHER=1"}) {
    const std::string job = std::string(" KOLO_LOG_LEVEL=info ") + knobs + " " + kKolorun +
                            " --nnodes 2 --rdzv 10.234.0.1:29733 --secret nodes -np 2 ";
    // Each node's tcp backend publishes its veth address (KOLO_TCP_HOST).
    runs[knobs] = run_command(namespaces.a() + "env KOLO_TCP_HOST=10.234.0.1" + job +
                                  "--node-rank 0 " + kWorker + " & p=$!; " + namespaces.b() +
                                  "env KOLO_TCP_HOST=10.234.0.2" + job + "--node-rank 1 " +
                                  kWorker + "; e=$?; wait $p; echo \"node exits $? $e\"",
                              100);
  }
  const ProcessRun& flat = runs["KOLO_HIERARCHICAL_ALLREDUCE=0"];
  expect_hierarchy_equals_flat(flat, runs["KOLO_HIERARCHICAL_ALLREDUCE=1"]);
  expect_hierarchy_equals_flat(flat,
                               runs["KOLO_HIERARCHICAL_ALLREDUCE=1 KOLO_HIERARCHICAL_ALLGATHER=1"],
                               "hierarchical allreduce", /*gathers=*/true);
}

// The autotuner's categorical dimension (issue 11). Threshold and cycle time are set, so fixed,
// the bucket grid is {0, 4 MiB} and one step is scored per configuration: the hierarchy (when
// searched) is the third configuration tried, a dozen steps in.
const std::string kTune =
    "KOLO_LOG_LEVEL=info KOLO_AUTOTUNE=1 KOLO_AUTOTUNE_SAMPLES=1 KOLO_AUTOTUNE_BUCKET_FROM=4MiB "
    "KOLO_AUTOTUNE_BUCKET_TO=4MiB KOLO_FUSION_THRESHOLD=1MiB KOLO_CYCLE_TIME=1ms";
const std::string kSteps = kWorker + " --steps 30";

// Each rank's applied configurations (hierarchical_worker --steps), split into their fields
// cycle/from_step/threshold/cycle_ns/bucket/hierarchical.
std::map<std::string, std::vector<std::vector<std::string>>> histories(const std::string& output) {
  std::map<std::string, std::vector<std::vector<std::string>>> out;
  const std::regex line("rank (\\d+): autotune history:([^\\n]*)");
  for (std::sregex_iterator it(output.begin(), output.end(), line), end; it != end; ++it) {
    auto& entries = out[(*it)[1]];
    std::istringstream words((*it)[2].str());
    for (std::string w; words >> w;) {
      std::vector<std::string> fields;
      std::stringstream ss(w);
      for (std::string f; std::getline(ss, f, '/');) fields.push_back(f);
      entries.push_back(fields);
    }
  }
  return out;
}

// Every rank recorded the same configurations (so each switched the hierarchy in the same cycle,
// before the same step), and none changed the user-set threshold or cycle time. Returns rank 0's.
std::vector<std::vector<std::string>> expect_same_history(const ProcessRun& r) {
  const auto by_rank = histories(r.output);
  EXPECT_EQ(by_rank.size(), 4u) << r.output;
  if (by_rank.empty()) return {};
  const auto& first = by_rank.begin()->second;
  for (const auto& [rank, entries] : by_rank) EXPECT_EQ(entries, first) << "rank " << rank;
  EXPECT_FALSE(first.empty()) << r.output;
  for (const auto& e : first) {
    EXPECT_EQ(e.size(), 6u);
    if (e.size() != 6u) break;
    EXPECT_EQ(e[2], "1048576");
    EXPECT_EQ(e[3], "1000000");
  }
  return first;
}

// Left unset on two hosts of two ranks, the knob is searched: the tuner switches the hierarchy
// on at least once, every rank at the same cycle and step, and every result of every step stays
// exact (closed forms in the worker, and the digest of all of them equals an untuned flat run's).
TEST(Autotune, SwitchesTheHierarchyOnEveryRankInTheSameCycleAndResultsStayExact) {
  const std::string trace = ::testing::TempDir() + "kolo_hier_tune_" + std::to_string(::getpid());
  ProcessRun flat = run_command(nodes(2, 2, "", kSteps), 100);
  ProcessRun tuned =
      run_command(nodes(2, 2, kTune + " KOLO_TIMELINE=" + trace + ".json", kSteps), 100);
  for (const ProcessRun* r : {&flat, &tuned}) {
    EXPECT_NE(r->output.find(zeros(2)), std::string::npos) << r->output;
    EXPECT_EQ(count_occurrences(r->output, "hierarchical worker passed"), 4) << r->output;
  }
  EXPECT_EQ(digests(flat.output).size(), 4u) << flat.output;
  EXPECT_EQ(digests(tuned.output), digests(flat.output)) << tuned.output;
  // Built off (the default is flat) on every rank, searched by rank 0.
  EXPECT_EQ(count_occurrences(tuned.output, "hierarchical allreduce: 2 hosts of 2 ranks"), 4)
      << tuned.output;
  EXPECT_EQ(count_occurrences(tuned.output, "searching KOLO_HIERARCHICAL_ALLREDUCE too"), 1)
      << tuned.output;
  const auto history = expect_same_history(tuned);
  int switches = 0;
  std::string state = "0";
  for (const auto& e : history) {
    if (e.size() == 6u && e[5] != state) ++switches;
    if (e.size() == 6u) state = e[5];
  }
  EXPECT_GE(switches, 1) << tuned.output;
  EXPECT_NE(tuned.output.find(", hierarchical allreduce on: step time "), std::string::npos)
      << tuned.output;
  // Each rank's timeline has the switch on its "autotune" counter track, as 0/1.
  for (int rank = 0; rank < 4; ++rank) {
    const std::string path = trace + ".rank" + std::to_string(rank) + ".json";
    std::ifstream in(path);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_GE(count_occurrences(text, "\"hierarchical_allreduce\":1}"), 1) << path;
    std::remove(path.c_str());
  }
}

// Hosts of unequal rank counts (2 + 1, started by hand as in UnequalHostsFailInitNamingThem):
// the hierarchy offered to the autotuner is not built, so the job trains flat and the tuner
// searches the rest only.
TEST(Autotune, UnequalHostsKeepTheFlatBackendAndAreNotSearched) {
  auto server = kolo::TcpStoreServer::start("127.0.0.1", 0, "s3cret");
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  ProcessRun r =
      run_command(by_hand(**server, {{0, 2, 0, 2}, {1, 2, 0, 2}, {0, 1, 1, 2}}, kTune, kSteps), 60);
  for (int rank = 0; rank < 3; ++rank)
    EXPECT_NE(r.output.find("rank " + std::to_string(rank) + " exit 0"), std::string::npos)
        << r.output;
  EXPECT_EQ(count_occurrences(r.output,
                              "hierarchical allreduce not used: hosts hold different "
                              "numbers of ranks"),
            3)
      << r.output;
  EXPECT_EQ(count_occurrences(r.output, "searching KOLO_HIERARCHICAL_ALLREDUCE"), 0) << r.output;
  const auto by_rank = histories(r.output);
  ASSERT_EQ(by_rank.size(), 3u) << r.output;
  EXPECT_FALSE(by_rank.begin()->second.empty()) << r.output;  // the rest was tuned
  for (const auto& [rank, entries] : by_rank) {
    EXPECT_EQ(entries, by_rank.begin()->second) << "rank " << rank;
    for (const auto& e : entries) EXPECT_EQ(e.back(), "0") << "rank " << rank;
  }
}

// Set by the user, to either value, the knob is never searched nor changed.
TEST(Autotune, NeverChangesAUserSetHierarchicalAllreduce) {
  for (const std::string value : {"0", "1"}) {
    SCOPED_TRACE("KOLO_HIERARCHICAL_ALLREDUCE=" + value);
    ProcessRun r =
        run_command(nodes(2, 2, kTune + " KOLO_HIERARCHICAL_ALLREDUCE=" + value, kSteps), 100);
    EXPECT_NE(r.output.find(zeros(2)), std::string::npos) << r.output;
    EXPECT_EQ(count_occurrences(r.output, "hierarchical worker passed"), 4) << r.output;
    EXPECT_EQ(count_occurrences(r.output, "searching KOLO_HIERARCHICAL_ALLREDUCE"), 0) << r.output;
    for (const auto& e : expect_same_history(r)) {
      if (e.size() == 6u) {
        EXPECT_EQ(e[5], value);
      }
    }
  }
}

}  // namespace
