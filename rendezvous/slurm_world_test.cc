// The Slurm launcher's pure side (rendezvous/slurm_world.h) over real environment maps, as srun
// writes them, every bad input included; and its world over real sockets (rank 0's store, a
// taken port, a missing secret).
#include "rendezvous/slurm_world.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <thread>

#include "rendezvous/tcp_store.h"

namespace kolo {
namespace {

using Names = std::vector<std::string>;

// What srun -N2 -n4 gave task 3 on the test cluster (scripts/slurm.sh), job 17 step 2.
EnvMap four_on_two(const std::string& procid = "3") {
  return {{"SLURM_JOB_ID", "17"},
          {"SLURM_STEP_ID", "2"},
          {"SLURM_PROCID", procid},
          {"SLURM_LOCALID", "1"},
          {"SLURM_NODEID", "1"},
          {"SLURM_NTASKS", "4"},
          {"SLURM_STEP_NUM_TASKS", "4"},
          {"SLURM_STEP_NUM_NODES", "2"},
          {"SLURM_STEP_NODELIST", "kolo-n[1-2]"},
          {"SLURM_JOB_NODELIST", "kolo-n[1-2]"},
          {"SLURM_STEP_TASKS_PER_NODE", "2(x2)"},
          {"SLURM_TASKS_PER_NODE", "2(x2)"}};
}

std::string error_of(const EnvMap& env) {
  Result<SlurmStep> s = parse_slurm_step(env);
  EXPECT_FALSE(s.ok());
  if (s.ok()) return "";
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  return s.status().message();
}

KnobSet knobs_of(const std::map<std::string, std::string>& vars) {
  Result<KnobSet> knobs = KnobSet::read(vars);
  EXPECT_TRUE(knobs.ok()) << knobs.status().to_string();
  return knobs.ok() ? *knobs : KnobSet::defaults();
}

TEST(Hostlist, ExpandsRangesListsPaddingAndProducts) {
  EXPECT_EQ(expand_hostlist("node1", "V").value(), Names({"node1"}));
  EXPECT_EQ(expand_hostlist("node[1-3,5],gpu7", "V").value(),
            Names({"node1", "node2", "node3", "node5", "gpu7"}));
  EXPECT_EQ(expand_hostlist("n[08-10]", "V").value(), Names({"n08", "n09", "n10"}));
  EXPECT_EQ(expand_hostlist("r[1-2]n[1-2]", "V").value(), Names({"r1n1", "r1n2", "r2n1", "r2n2"}));
  EXPECT_EQ(expand_hostlist("a-b[1-2].x,c", "V").value(), Names({"a-b1.x", "a-b2.x", "c"}));
}

TEST(Hostlist, MalformedListsNameTheVariableAndTheValue) {
  for (const char* bad : {"n[1-3", "n[3-1]", "n[a]", "", "n1,,n2", "[1-2]", "n[1-]"}) {
    Result<Names> r = expand_hostlist(bad, "SLURM_STEP_NODELIST");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("SLURM_STEP_NODELIST=" + std::string(bad) + " is invalid"),
              std::string::npos)
        << r.status().message();
  }
  EXPECT_NE(expand_hostlist("n[3-1]", "V").status().message().find("range 3-1 ends below"),
            std::string::npos);
}

TEST(TasksPerNode, ExpandsRepeatsAndRefusesGarbage) {
  EXPECT_EQ(expand_tasks_per_node("2(x3),1", "V").value(), std::vector<int>({2, 2, 2, 1}));
  EXPECT_EQ(expand_tasks_per_node("4", "V").value(), std::vector<int>({4}));
  for (const char* bad : {"", "0", "2(x0)", "2(x3", "x", "2(y3)", "-1"}) {
    Result<std::vector<int>> r = expand_tasks_per_node(bad, "SLURM_TASKS_PER_NODE");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("SLURM_TASKS_PER_NODE="), std::string::npos);
  }
}

TEST(SlurmStep, DetectsAStepNotABatchScript) {
  EXPECT_TRUE(is_slurm_step(four_on_two()));
  EnvMap batch = four_on_two();
  batch.erase("SLURM_STEP_ID");
  EXPECT_FALSE(is_slurm_step(batch));
  batch["SLURM_STEPID"] = "0";  // the older name
  EXPECT_TRUE(is_slurm_step(batch));
  EXPECT_FALSE(is_slurm_step({}));
}

TEST(SlurmStep, ReadsEveryCoordinateOfEachTask) {
  // Tasks 0..3 of srun -N2 -n4: two per node, block distribution.
  for (int r = 0; r < 4; ++r) {
    EnvMap env = four_on_two(std::to_string(r));
    env["SLURM_LOCALID"] = std::to_string(r % 2);
    env["SLURM_NODEID"] = std::to_string(r / 2);
    Result<SlurmStep> s = parse_slurm_step(env);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    EXPECT_EQ(s->rank, r);
    EXPECT_EQ(s->size, 4);
    EXPECT_EQ(s->local_rank, r % 2);
    EXPECT_EQ(s->local_size, 2);
    EXPECT_EQ(s->cross_rank, r / 2);
    EXPECT_EQ(s->cross_size, 2);
    EXPECT_EQ(s->nodes, Names({"kolo-n1", "kolo-n2"}));
    EXPECT_EQ(s->job_id, 17);
    EXPECT_EQ(s->step_id, 2);
  }
}

TEST(SlurmStep, UnevenNodesGiveTheCrossGroupOfTheLocalRank) {
  // srun -n5 over 3 nodes: 2,2,1. Local rank 1 exists on the first two nodes only.
  EnvMap env = {{"SLURM_JOB_ID", "5"},
                {"SLURM_STEP_ID", "0"},
                {"SLURM_PROCID", "3"},
                {"SLURM_LOCALID", "1"},
                {"SLURM_NODEID", "1"},
                {"SLURM_NTASKS", "5"},
                {"SLURM_JOB_NODELIST", "c[1-3]"},
                {"SLURM_TASKS_PER_NODE", "2(x2),1"}};
  Result<SlurmStep> s = parse_slurm_step(env);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->local_size, 2);
  EXPECT_EQ(s->cross_rank, 1);
  EXPECT_EQ(s->cross_size, 2);
  env["SLURM_PROCID"] = "4";
  env["SLURM_LOCALID"] = "0";
  env["SLURM_NODEID"] = "2";
  s = parse_slurm_step(env);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->local_size, 1);
  EXPECT_EQ(s->cross_rank, 2);
  EXPECT_EQ(s->cross_size, 3);
}

TEST(SlurmStep, EveryInconsistencyNamesTheVariable) {
  auto without = [](const std::string& name) {
    EnvMap env = four_on_two();
    env.erase(name);
    return env;
  };
  auto with = [](const std::string& name, const std::string& value) {
    EnvMap env = four_on_two();
    env[name] = value;
    return env;
  };
  EXPECT_EQ(error_of(without("SLURM_PROCID")),
            "SLURM_PROCID is not set: expected this task's rank in the Slurm job step (srun sets "
            "it in every task of a job step)");
  EXPECT_EQ(error_of(with("SLURM_PROCID", "4")),
            "SLURM_PROCID=4 is invalid: expected this task's rank in the Slurm job step, an "
            "integer in [0, 3 (the step's tasks - 1)]");
  EXPECT_EQ(error_of(with("SLURM_STEP_NUM_TASKS", "3")),
            "SLURM_STEP_NUM_TASKS=3 disagrees with SLURM_STEP_TASKS_PER_NODE=2(x2), which counts "
            "4 tasks");
  EXPECT_EQ(error_of(with("SLURM_STEP_NODELIST", "kolo-n[1-3]")),
            "SLURM_STEP_TASKS_PER_NODE=2(x2) gives tasks for 2 nodes but "
            "SLURM_STEP_NODELIST=kolo-n[1-3] names 3 nodes");
  EXPECT_EQ(error_of(with("SLURM_STEP_NUM_NODES", "3")),
            "SLURM_STEP_NUM_NODES=3 disagrees with SLURM_STEP_NODELIST=kolo-n[1-2], which names 2 "
            "nodes");
  EXPECT_NE(error_of(with("SLURM_NODEID", "2")).find("SLURM_NODEID=2 is invalid"),
            std::string::npos);
  EXPECT_NE(error_of(with("SLURM_LOCALID", "2")).find("SLURM_LOCALID=2 is invalid"),
            std::string::npos);
  EXPECT_NE(error_of(with("SLURM_STEP_NUM_TASKS", "four")).find("SLURM_STEP_NUM_TASKS=four"),
            std::string::npos);
  EXPECT_NE(error_of(without("SLURM_LOCALID")).find("SLURM_LOCALID is not set"), std::string::npos);
  EnvMap no_list = without("SLURM_STEP_NODELIST");
  no_list.erase("SLURM_JOB_NODELIST");
  EXPECT_NE(error_of(no_list).find("SLURM_STEP_NODELIST or SLURM_JOB_NODELIST is not set"),
            std::string::npos);
  EnvMap no_tasks = without("SLURM_STEP_NUM_TASKS");
  no_tasks.erase("SLURM_NTASKS");
  EXPECT_NE(error_of(no_tasks).find("SLURM_STEP_NUM_TASKS or SLURM_NTASKS is not set"),
            std::string::npos);
  // Rank 0 away from the first node, where everyone looks for the store.
  EnvMap away = four_on_two("0");
  away["SLURM_LOCALID"] = "0";
  EXPECT_NE(error_of(away).find("SLURM_PROCID=0 runs on node 1"), std::string::npos);
}

TEST(SlurmStep, StepValuesWinOverTheJobs) {
  // Inside an sbatch of 4 tasks, `srun -n2` on the first node: the step's variables count.
  EnvMap env = four_on_two("1");
  env["SLURM_STEP_NUM_TASKS"] = "2";
  env["SLURM_STEP_TASKS_PER_NODE"] = "2";
  env["SLURM_STEP_NODELIST"] = "kolo-n1";
  env["SLURM_STEP_NUM_NODES"] = "1";
  env["SLURM_NODEID"] = "0";
  Result<SlurmStep> s = parse_slurm_step(env);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->size, 2);
  EXPECT_EQ(s->nodes, Names({"kolo-n1"}));
}

TEST(SlurmStore, PortIsDerivedFromJobAndStepAndInRange) {
  EXPECT_EQ(slurm_store_port(17, 2), slurm_store_port(17, 2));
  EXPECT_EQ(slurm_store_port(17, 3), slurm_store_port(17, 2) + 1);
  EXPECT_NE(slurm_store_port(18, 2), slurm_store_port(17, 2));
  for (int64_t job : {0LL, 1LL, 99999LL, 4294967295LL})
    for (int64_t step : {0LL, 1LL, 4294967294LL}) {
      const int p = slurm_store_port(job, step);
      EXPECT_GE(p, 10000);
      EXPECT_LT(p, 32000);
    }
  SlurmStep step = parse_slurm_step(four_on_two()).value();
  Result<HostPort> a = slurm_store_address(step, KnobSet::defaults());
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "kolo-n1");
  EXPECT_EQ(a->port, slurm_store_port(17, 2));
  a = slurm_store_address(step, knobs_of({{"KOLO_STORE_ADDR", "10.0.0.1:29500"}}));
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->to_string(), "10.0.0.1:29500");
}

TEST(SlurmSecret, FromTheEnvironmentOrAPrivateFileElseAClearRefusal) {
  SlurmStep step = parse_slurm_step(four_on_two()).value();
  EXPECT_EQ(slurm_secret(step, knobs_of({{"KOLO_SECRET", "s3"}})).value(), "s3");
  const std::string path = ::testing::TempDir() + "kolo_slurm_secret";
  std::remove(path.c_str());
  std::ofstream(path) << "from-file\n";
  ::chmod(path.c_str(), 0644);
  Result<std::string> r = slurm_secret(step, knobs_of({{"KOLO_SECRET_FILE", path}}));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "KOLO_SECRET_FILE " + path +
                                      " has mode 0644: other users may read it; make it private "
                                      "with chmod 600 " +
                                      path);
  ::chmod(path.c_str(), 0600);
  EXPECT_EQ(slurm_secret(step, knobs_of({{"KOLO_SECRET_FILE", path}})).value(), "from-file");
  std::remove(path.c_str());
  r = slurm_secret(step, KnobSet::defaults());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("KOLO_SECRET and KOLO_SECRET_FILE are both unset"),
            std::string::npos);
  EXPECT_NE(r.status().message().find("export KOLO_SECRET="), std::string::npos);
  step.size = 1;  // a single task needs no store on the network
  EXPECT_TRUE(slurm_secret(step, KnobSet::defaults()).ok());
}

// A one-node step of two tasks on this host. Each test that listens names its own job, so that
// tests CTest runs at once derive different ports.
EnvMap two_here(int rank, int job = 4242) {
  return {{"SLURM_JOB_ID", std::to_string(job)},
          {"SLURM_STEP_ID", "0"},
          {"SLURM_PROCID", std::to_string(rank)},
          {"SLURM_LOCALID", std::to_string(rank)},
          {"SLURM_NODEID", "0"},
          {"SLURM_STEP_NUM_TASKS", "2"},
          {"SLURM_STEP_NODELIST", "localhost"},
          {"SLURM_STEP_TASKS_PER_NODE", "2"}};
}

TEST(SlurmWorld, RankZeroHostsTheStoreAndTheOtherConnects) {
  const KnobSet knobs = knobs_of({{"KOLO_SECRET", "s"}, {"KOLO_RENDEZVOUS_TIMEOUT", "5s"}});
  Result<World> w1 = Status::Internal("not run");
  std::thread other([&] { w1 = world_from_slurm_env(two_here(1), knobs); });
  Result<World> w0 = world_from_slurm_env(two_here(0), knobs);
  other.join();
  ASSERT_TRUE(w0.ok()) << w0.status().to_string();
  ASSERT_TRUE(w1.ok()) << w1.status().to_string();
  EXPECT_NE(w0->server, nullptr);
  EXPECT_EQ(w1->server, nullptr);
  EXPECT_EQ(w1->rank, 1);
  EXPECT_EQ(w1->local_size, 2);
  ASSERT_TRUE(w1->store->set("k", "v").ok());
  Result<std::string> v = w0->store->get("k", std::chrono::seconds(5));
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  EXPECT_EQ(*v, "v");
}

TEST(SlurmWorld, ATakenPortFailsRankZeroAndTheOthersWithinTheTimeout) {
  // Another job's store on the derived port: rank 0 cannot bind it, rank 1 is refused by it.
  const int port = slurm_store_port(4243, 0);
  auto squatter = TcpStoreServer::start("127.0.0.1", port, "another job's secret");
  ASSERT_TRUE(squatter.ok()) << squatter.status().to_string();
  const KnobSet knobs = knobs_of({{"KOLO_SECRET", "s"}, {"KOLO_RENDEZVOUS_TIMEOUT", "2s"}});
  Result<World> w0 = world_from_slurm_env(two_here(0, 4243), knobs);
  ASSERT_FALSE(w0.ok());
  EXPECT_NE(w0.status().message().find("slurm world: rank 0: could not start the rendezvous "
                                       "store on port " +
                                       std::to_string(port) +
                                       " (port derived from SLURM_JOB_ID=4243 and "
                                       "SLURM_STEP_ID=0; set KOLO_STORE_ADDR=HOST:PORT"),
            std::string::npos)
      << w0.status().message();
  const auto start = std::chrono::steady_clock::now();
  Result<World> w1 = world_from_slurm_env(two_here(1, 4243), knobs);
  ASSERT_FALSE(w1.ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_NE(w1.status().message().find("slurm world: rank 1: connecting to rank 0's rendezvous "
                                       "store at 127.0.0.1:" +
                                       std::to_string(port)),
            std::string::npos)
      << w1.status().message();
}

TEST(SlurmWorld, NoSecretIsRefusedBeforeAnythingListens) {
  Result<World> w = world_from_slurm_env(two_here(0), KnobSet::defaults());
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("KOLO_SECRET and KOLO_SECRET_FILE are both unset"),
            std::string::npos);
}

}  // namespace
}  // namespace kolo
