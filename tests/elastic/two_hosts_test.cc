// Elastic training on two hosts: one kolorun per network namespace (tests/support/
// two_namespaces.h), node 0 serving the store and driving the generations (Note [Elastic nodes]
// in tools/kolorun/elastic_nodes.h): a whole host lost (its kolorun SIGKILLed, its workers die
// with it), the link cut, a host that joins later (started late, or listed late by the discovery
// script), too few left, node 0 lost, and nodes started with different bounds. Needs root for the
// namespaces; every test skips, saying why, without it.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include "tests/faults/launch.h"
#include "tests/support/run_command.h"
#include "tests/support/two_namespaces.h"

namespace {

using namespace std::chrono_literals;
using kolo::faults::Clock;
using kolo::faults::Launch;
using kolo::testing::count_occurrences;
using kolo::testing::TwoNamespaces;

constexpr const char* kSubnet = "10.234.0";
constexpr const char* kRdzv = "10.234.0.1:29761";

int exit_code(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

class ElasticNodes : public ::testing::Test {
 protected:
  void SetUp() override {
    namespaces_ = std::make_unique<TwoNamespaces>("ke");
    if (!namespaces_->ok()) GTEST_SKIP() << namespaces_->why();
    auto link = namespaces_->link(kSubnet);
    ASSERT_EQ(link.exit_code, 0) << link.output;
  }

  // kolorun of node `node` in namespace a (node 0) or b (any other), with the worker's flags.
  std::string node(int node, const std::string& kolorun_flags, const std::string& worker_flags,
                   const std::string& env = "") const {
    const std::string host = std::string(kSubnet) + (node == 0 ? ".1" : ".2");
    return "exec " + (node == 0 ? namespaces_->a() : namespaces_->b()) +
           "env KOLO_SECRET=elastic-nodes KOLO_CPU_OPERATIONS=tcp KOLO_TCP_HOST=" + host + " " +
           env + " " + KOLO_TEST_KOLORUN + " --node-rank " + std::to_string(node) + " --rdzv " +
           kRdzv + " --grace 1s " + kolorun_flags + " " + KOLO_TEST_WORKER + " " + worker_flags;
  }

  std::unique_ptr<TwoNamespaces> namespaces_;
};

std::string both(const Launch& n0, const Launch& n1) {
  return "---- node 0:\n" + n0.output() + "---- node 1:\n" + n1.output();
}

// Node 1's kolorun SIGKILLed mid-run: its workers die with it, node 0 gives the node up after
// its heartbeat stops and its two ranks finish every step exactly once.
TEST_F(ElasticNodes, AWholeHostLostLeavesTheOtherToFinish) {
  const std::string flags = "--nnodes 2 -np 2 --min-np 2";
  const std::string work = "--steps 60 --commit-every 5 --step-ms 50";
  Launch n0(node(0, flags, work)), n1(node(1, flags, work));
  ASSERT_TRUE(n1.wait_for("step 0 generation 0 size 4", 2, 60s)) << both(n0, n1);
  std::this_thread::sleep_for(300ms);
  n1.signal(SIGKILL);
  auto s0 = n0.finish(60s);
  n1.finish(5s);
  ASSERT_TRUE(s0) << both(n0, n1);
  EXPECT_EQ(exit_code(*s0), 0) << both(n0, n1);
  EXPECT_EQ(count_occurrences(n0.output(), "kolorun: node 1 (host "), 1) << both(n0, n1);
  EXPECT_EQ(count_occurrences(n0.output(),
                              ") lost: no heartbeat for 1500ms; its worker(s) 2 and "
                              "3 are lost with it"),
            1)
      << both(n0, n1);
  EXPECT_EQ(count_occurrences(n0.output(), "done steps 60 weights 60.0 generation "), 2)
      << both(n0, n1);
  EXPECT_EQ(count_occurrences(n0.output(), " size 2 resets "), 2) << both(n0, n1);
}

// The link to node 1 taken down: nothing breaks, packets just vanish. Node 0 gives node 1 up
// when its beat stops, its ranks fail their step within the op timeout and re-form without node
// 1's; node 1's kolorun, cut off from the store, stops its workers and exits 1 saying so.
TEST_F(ElasticNodes, ACutLinkLeavesNodeZeroToFinishAndNodeOneToStop) {
  const std::string flags = "--nnodes 2 -np 2 --min-np 2";
  const std::string work = "--steps 100 --commit-every 5 --step-ms 50";
  Launch n0(node(0, flags, work, "KOLO_OP_TIMEOUT=3s")), n1(node(1, flags, work));
  ASSERT_TRUE(n1.wait_for("step 0 generation 0 size 4", 2, 60s)) << both(n0, n1);
  std::this_thread::sleep_for(300ms);
  ASSERT_EQ(
      kolo::testing::run_command(namespaces_->a() + "ip link set " + namespaces_->name() + "x down")
          .exit_code,
      0);
  auto s0 = n0.finish(60s), s1 = n1.finish(20s);
  ASSERT_TRUE(s0 && s1) << both(n0, n1);
  EXPECT_EQ(exit_code(*s0), 0) << both(n0, n1);
  EXPECT_EQ(exit_code(*s1), 1) << both(n0, n1);
  EXPECT_EQ(count_occurrences(n0.output(), ") lost: no heartbeat for 1500ms"), 1) << both(n0, n1);
  EXPECT_EQ(count_occurrences(n0.output(), "done steps 100 weights 100.0 generation "), 2)
      << both(n0, n1);
  EXPECT_EQ(count_occurrences(n1.output(), "kolorun: lost node 0's store ("), 1) << both(n0, n1);
  EXPECT_EQ(count_occurrences(n1.output(), "done steps"), 0) << both(n0, n1);
}

// Node 1 started after node 0's job runs (--node-rank 1 past --nnodes 1): it registers, node 0
// starts two workers there, and they join at a commit; the job finishes with four ranks.
TEST_F(ElasticNodes, AHostStartedLaterJoinsAtACommit) {
  const std::string flags = "--nnodes 1 -np 2 --min-np 2 --max-np 4";
  const std::string work = "--steps 80 --commit-every 5 --step-ms 50";
  Launch n0(node(0, flags, work));
  ASSERT_TRUE(n0.wait_for("step 0 generation 0 size 2", 2, 60s)) << n0.output();
  Launch n1(node(1, flags, work));
  auto s0 = n0.finish(60s), s1 = n1.finish(20s);
  ASSERT_TRUE(s0 && s1) << both(n0, n1);
  EXPECT_EQ(exit_code(*s0), 0) << both(n0, n1);
  EXPECT_EQ(exit_code(*s1), 0) << both(n0, n1);
  EXPECT_EQ(count_occurrences(n0.output(), "kolorun: node 1 (host "), 1) << both(n0, n1);
  EXPECT_EQ(count_occurrences(n0.output(), ") joined offering 2 worker(s); starting 2"), 1)
      << both(n0, n1);
  const std::string out = both(n0, n1);
  EXPECT_EQ(count_occurrences(out, "done steps 80 weights 80.0 generation "), 4) << out;
  EXPECT_EQ(count_occurrences(out, " size 4 resets "), 4) << out;
  // The newcomers joined at a commit, with the state synced.
  const size_t joined = n1.output().find("] step ");
  ASSERT_NE(joined, std::string::npos) << out;
  EXPECT_EQ(std::stoi(n1.output().substr(joined + 7)) % 5, 0) << out;
}

// Node 1's kolorun runs, registered, but gets workers only once node 0's discovery script lists
// its host (by its name in plans: the namespaces share a hostname, so "<hostname>/node1").
TEST_F(ElasticNodes, AHostListedLaterByTheDiscoveryScriptGetsWorkers) {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  const std::string dir = ::testing::TempDir() + "kolo_two_hosts_" + std::to_string(::getpid());
  const std::string list = dir + "/hosts", script = dir + "/discover.sh";
  ::mkdir(dir.c_str(), 0700);
  auto write = [](const std::string& path, const std::string& text) {
    std::ofstream(path) << text;
  };
  write(list, "localhost:2\n");
  write(script, "#!/bin/sh\ncat " + list + "\n");
  ASSERT_EQ(::chmod(script.c_str(), 0700), 0);
  const std::string flags =
      "--nnodes 1 -np 2 --min-np 2 --max-np 4 --discovery-interval 200ms "
      "--host-discovery-script " +
      script;
  const std::string work = "--steps 100 --commit-every 5 --step-ms 50";
  Launch n0(node(0, flags, work));
  ASSERT_TRUE(n0.wait_for("step 0 generation 0 size 2", 2, 60s)) << n0.output();
  Launch n1(node(1, flags, work));
  ASSERT_TRUE(
      n0.wait_for("kolorun: node 1 .* joined; it gets workers when the discovery script "
                  "lists it as ",
                  1, 30s))
      << both(n0, n1);
  // Written whole and renamed, so that a run never reads half a list.
  write(list + ".new", "localhost:2\n" + std::string(name) + "/node1:2\n");
  ASSERT_EQ(std::rename((list + ".new").c_str(), list.c_str()), 0);
  auto s0 = n0.finish(60s), s1 = n1.finish(20s);
  kolo::testing::run_command("rm -rf " + dir);
  ASSERT_TRUE(s0 && s1) << both(n0, n1);
  EXPECT_EQ(exit_code(*s0), 0) << both(n0, n1);
  EXPECT_EQ(exit_code(*s1), 0) << both(n0, n1);
  const std::string out = both(n0, n1);
  EXPECT_EQ(count_occurrences(out, "done steps 100 weights 100.0 generation "), 4) << out;
  EXPECT_EQ(count_occurrences(out, " size 4 resets "), 4) << out;
}

// --min-np 3 and node 1 lost: two ranks left; the job ends with one message, on node 0's
// kolorun and on each of its ranks, and a non-zero exit, well within the rendezvous timeout.
TEST_F(ElasticNodes, TooFewLeftAfterAHostIsLostEndsTheJobSayingSo) {
  const std::string flags = "--nnodes 2 -np 2 --min-np 3";
  const std::string work = "--steps 200 --commit-every 5 --step-ms 50";
  Launch n0(node(0, flags, work)), n1(node(1, flags, work));
  ASSERT_TRUE(n1.wait_for("step 0 generation 0 size 4", 2, 60s)) << both(n0, n1);
  const auto killed = Clock::now();
  n1.signal(SIGKILL);
  auto s0 = n0.finish(30s);
  n1.finish(5s);
  ASSERT_TRUE(s0) << both(n0, n1);
  EXPECT_NE(exit_code(*s0), 0) << both(n0, n1);
  EXPECT_LT(n0.ended() - killed, 15s) << both(n0, n1);
  const std::string why = "2 ranks left, fewer than --min-np 3: lost worker 2 (";
  EXPECT_EQ(count_occurrences(n0.output(), "kolorun: " + why), 3) << both(n0, n1);  // +2 ranks
  // Each of the three names both lost workers so.
  EXPECT_EQ(count_occurrences(n0.output(), "lost with node 1 (host "), 6) << both(n0, n1);
  EXPECT_EQ(count_occurrences(n0.output(), "done steps"), 0) << both(n0, n1);
}

// --min-np 4 and a worker of node 1 killed: three left. Both kolorun print node 0's message and
// exit non-zero, and so does every rank left, on both nodes.
TEST_F(ElasticNodes, TooFewLeftEndsTheJobOnEveryNodeWithOneMessage) {
  const std::string flags = "--nnodes 2 -np 2 --min-np 4";
  const std::string work = "--steps 200 --commit-every 5 --step-ms 50 --die 2:10:0";
  Launch n0(node(0, flags, work)), n1(node(1, flags, work));
  auto s0 = n0.finish(60s), s1 = n1.finish(20s);
  ASSERT_TRUE(s0 && s1) << both(n0, n1);
  EXPECT_EQ(exit_code(*s0), 1) << both(n0, n1);
  EXPECT_EQ(exit_code(*s1), 1) << both(n0, n1);
  const std::string why = "kolorun: 3 ranks left, fewer than --min-np 4: lost worker 2 (";
  EXPECT_EQ(count_occurrences(n0.output(), why), 3) << both(n0, n1);  // kolorun, 2 ranks
  EXPECT_EQ(count_occurrences(n1.output(), why), 2) << both(n0, n1);  // kolorun, worker 3
  EXPECT_EQ(count_occurrences(n1.output(), "kolorun: worker 2 (pid "), 1) << both(n0, n1);
  EXPECT_EQ(count_occurrences(both(n0, n1), "done steps"), 0) << both(n0, n1);
}

// Node 0's kolorun SIGKILLed: the store goes with it. Node 1's kolorun says so, stops its
// workers and exits 1 within seconds, never waiting for a world that cannot come.
TEST_F(ElasticNodes, NodeZeroLostEndsTheOtherNodeWithinSeconds) {
  const std::string flags = "--nnodes 2 -np 2 --min-np 2";
  const std::string work = "--steps 400 --commit-every 5 --step-ms 50";
  Launch n0(node(0, flags, work)), n1(node(1, flags, work));
  ASSERT_TRUE(n1.wait_for("step 0 generation 0 size 4", 2, 60s)) << both(n0, n1);
  const auto killed = Clock::now();
  n0.signal(SIGKILL);
  auto s1 = n1.finish(30s);
  n0.finish(5s);
  ASSERT_TRUE(s1) << both(n0, n1);
  EXPECT_EQ(exit_code(*s1), 1) << both(n0, n1);
  EXPECT_LT(n1.ended() - killed, 10s) << both(n0, n1);
  EXPECT_EQ(count_occurrences(n1.output(), "kolorun: lost node 0's store ("), 1) << both(n0, n1);
  EXPECT_EQ(count_occurrences(n1.output(), "done steps"), 0) << both(n0, n1);
}

// Nodes started with different elastic bounds: the second names the flags that must agree and
// starts nothing; node 0, left waiting for it, gives up at --timeout.
TEST_F(ElasticNodes, DifferentBoundsOnTheNodesAreRefusedNamingThem) {
  const std::string work = "--steps 10";
  Launch n0(node(0, "--nnodes 2 -np 2 --min-np 2 --timeout 5s", work));
  Launch n1(node(1, "--nnodes 2 -np 2 --min-np 3 --timeout 5s", work));
  auto s1 = n1.finish(20s), s0 = n0.finish(20s);
  ASSERT_TRUE(s0 && s1) << both(n0, n1);
  EXPECT_NE(exit_code(*s1), 0) << both(n0, n1);
  EXPECT_NE(exit_code(*s0), 0) << both(n0, n1);
  EXPECT_EQ(count_occurrences(n1.output(),
                              "node 1 was started with nnodes=2 np=2 min-np=3 max-np=4 but node "
                              "0 with nnodes=2 np=2 min-np=2 max-np=4: every node needs the same "
                              "--nnodes, -np, --min-np and --max-np"),
            1)
      << both(n0, n1);
  EXPECT_EQ(count_occurrences(both(n0, n1), "step 0"), 0) << both(n0, n1);
}

}  // namespace
