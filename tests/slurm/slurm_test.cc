// Kolo under a real Slurm: jobs started by srun alone (rendezvous/slurm_world.h), by sbatch of
// the documented script (examples/slurm/kolo.sbatch), kolorun inside a step, a task killed, and
// the bad inputs that only a real step shows (no secret, inconsistent SLURM_* on every rank).
// The cluster is scripts/slurm.sh's (CTest fixture slurm_up); without it every test skips and
// says why. Paths come from CMake (CMakeLists.txt).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/support/run_command.h"

namespace {

using kolo::testing::count_occurrences;
using kolo::testing::ProcessRun;
using kolo::testing::run_command;

const std::string kWorker = KOLO_TEST_WORKER;

std::string slurm_dir() {
  const char* d = std::getenv("KOLO_SLURM_DIR");
  return d != nullptr && *d != '\0' ? d : "/tmp/kolo-slurm";
}

// The environment every Slurm command here runs in: the private cluster's configuration, a job
// secret, short rendezvous waits.
std::string env() {
  return "SLURM_CONF=" + slurm_dir() +
         "/slurm.conf KOLO_SECRET=slurm-test-secret KOLO_RENDEZVOUS_TIMEOUT=10s ";
}

// srun with a time limit, so that nothing outlives a test.
std::string srun(const std::string& shape) { return env() + "srun -t 1 " + shape + " "; }

// Whether the cluster answers, asked once for the whole binary (every suite agrees): sinfo
// lists a node that can take jobs (idle, mixed, allocated or completing one).
struct Cluster {
  bool up = false;
  std::string why;
};
const Cluster& cluster() {
  static const Cluster c = [] {
    ProcessRun r = run_command("SLURM_CONF=" + slurm_dir() + "/slurm.conf sinfo -h -o %t", 10);
    Cluster out;
    for (const char* state : {"idle", "mix", "alloc", "comp"})
      out.up = out.up || (r.exit_code == 0 && r.output.find(state) != std::string::npos);
    out.why =
        "no Slurm cluster answers (scripts/slurm.sh up needs root and the packages "
        "slurmctld slurmd munge slurm-client): sinfo said: " +
        r.output;
    return out;
  }();
  return c;
}

class Slurm : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cluster().up) GTEST_SKIP() << cluster().why;
  }
};

// tcp on one node and on two; the hierarchical composite across the two nodes (two tasks on
// each: -n4 alone may place 3 and 1, which the hierarchical algorithms refuse).
TEST_F(Slurm, EveryCollectiveTcpTwoTasksOneNode) {
  ProcessRun r = run_command(srun("-N1 -n2") + kWorker + " --backend tcp");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "checks passed"), 2) << r.output;
}

TEST_F(Slurm, EveryCollectiveTcpFourTasksTwoNodes) {
  ProcessRun r = run_command(srun("-N2 -n4") + kWorker + " --backend tcp");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "rank 3 of 4 (tcp): "), 1) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "checks passed"), 4) << r.output;
}

TEST_F(Slurm, EveryCollectiveHierarchicalFourTasksTwoNodes) {
  ProcessRun r =
      run_command(srun("-N2 --ntasks-per-node=2") + kWorker + " --backend tcp --hierarchical tcp");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "checks passed"), 4) << r.output;
}

// shm needs every rank on one host: one node, 2 and 4 tasks, across chunk boundaries.
class SlurmShm : public Slurm, public ::testing::WithParamInterface<int> {};
TEST_P(SlurmShm, EveryCollectiveShmOneNode) {
  const int n = GetParam();
  ProcessRun r = run_command("KOLO_SHM_CHUNK=4KiB KOLO_SHM_THRESHOLD=1KiB " +
                             srun("-N1 -O -n" + std::to_string(n)) + kWorker +
                             " --backend shm --counts 0,1," + std::to_string(n + 1) + ",1031,3001");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "checks passed"), n) << r.output;
}
INSTANTIATE_TEST_SUITE_P(Tasks, SlurmShm, ::testing::Values(2, 4));

// A task that dies mid-collective (the worker's rank 1 raises SIGKILL): the job fails, srun names
// the task, and the survivor's collective fails naming rank 1.
TEST_F(Slurm, ATaskKilledFailsTheJobNamingIt) {
  ProcessRun r = run_command(srun("-N1 -n2") + kWorker + " --backend tcp --mode kill");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("task 1: Killed"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("collectives_worker rank 0: allreduce failed"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("rank 1"), std::string::npos) << r.output;
}

// scancel --signal=KILL on a running step: srun reports the tasks killed and fails.
TEST_F(Slurm, ScancelKillFailsTheJobNamingTheTasks) {
  ProcessRun r = run_command(
      srun("-N1 -n2 -J kolo-scancel") + kWorker + " --backend tcp --mode loop & p=$!; " +
          "for i in $(seq 100); do j=$(SLURM_CONF=" + slurm_dir() +
          "/slurm.conf squeue -h -n kolo-scancel -o %i); [ -n \"$j\" ] && break; sleep 0.1; done;"
          " sleep 1; SLURM_CONF=" +
          slurm_dir() +
          "/slurm.conf scancel --signal=KILL \"$j.0\"; wait $p; echo \"srun exit $?\"",
      60);
  EXPECT_EQ(r.output.find("srun exit 0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("tasks 0-1: Killed"), std::string::npos) << r.output;
}

// No secret: every rank refuses to start, naming both variables, before anything listens.
TEST_F(Slurm, NoSecretIsRefusedOnEveryRank) {
  ProcessRun r = run_command(srun("-N2 -n4") + "env -u KOLO_SECRET " + kWorker + " --backend tcp");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "KOLO_SECRET and KOLO_SECRET_FILE are both unset"), 4)
      << r.output;
}

// SLURM_* that disagree (a task count against the tasks per node): every rank names them.
TEST_F(Slurm, InconsistentVariablesAreNamedOnEveryRank) {
  ProcessRun r =
      run_command(srun("-N1 -n2") + "env SLURM_STEP_NUM_TASKS=3 " + kWorker + " --backend tcp");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_occurrences(r.output,
                              "SLURM_STEP_NUM_TASKS=3 disagrees with "
                              "SLURM_STEP_TASKS_PER_NODE=2, which counts 2 tasks"),
            2)
      << r.output;
  r = run_command(srun("-N1 -n2") + "env -u SLURM_PROCID " + kWorker + " --backend tcp");
  EXPECT_EQ(count_occurrences(r.output, "SLURM_PROCID is not set"), 2) << r.output;
}

// kolorun inside a step: kolorun's world wins, and says so at info level.
TEST_F(Slurm, KolorunInsideAStepWins) {
  ProcessRun r = run_command("KOLO_LOG_LEVEL=info " + srun("-N1 -n1") + KOLO_TEST_KOLORUN +
                             " -np 2 " + kWorker + " --backend tcp");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "kolorun's world wins"), 2) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "checks passed"), 2) << r.output;
}

// The documented batch script (docs/clusters.md), as a user submits it.
TEST_F(Slurm, SbatchOfTheDocumentedScript) {
  const std::string out = ::testing::TempDir() + "kolo_sbatch.out";
  std::remove(out.c_str());
  ProcessRun r = run_command("SLURM_CONF=" + slurm_dir() + "/slurm.conf sbatch --wait -o " + out +
                             " " + KOLO_TEST_SBATCH_SCRIPT + " " + kWorker + " --backend tcp");
  std::stringstream text;
  text << std::ifstream(out).rdbuf();
  EXPECT_EQ(r.exit_code, 0) << r.output << text.str();
  EXPECT_EQ(count_occurrences(text.str(), "checks passed"), 4) << text.str();
  std::remove(out.c_str());
}

#ifdef KOLO_TEST_TORCH_SBATCH_SCRIPT
// The documented kolo.torch batch script with a Horovod-style training script, on 2 tasks (one
// per node; the script's 2x2 shape costs 40 s of torch imports on a 2-core machine).
TEST_F(Slurm, SbatchOfTheDocumentedTorchScript) {
  const std::string out = ::testing::TempDir() + "kolo_torch_sbatch.out";
  std::remove(out.c_str());
  ProcessRun r = run_command(
      std::string("PYTHONPATH=") + KOLO_TEST_TORCH_PYTHONPATH + " SLURM_CONF=" + slurm_dir() +
          "/slurm.conf sbatch --wait --ntasks-per-node=1 "
          "--cpus-per-task=1 -o " +
          out + " " + KOLO_TEST_TORCH_SBATCH_SCRIPT + " " + KOLO_TEST_TORCH_SCRIPT,
      110);
  std::stringstream text;
  text << std::ifstream(out).rdbuf();
  EXPECT_EQ(r.exit_code, 0) << r.output << text.str();
  EXPECT_EQ(count_occurrences(text.str(), "[ok] horovod_style"), 2) << text.str();
  std::remove(out.c_str());
}
#endif

#ifdef KOLO_TEST_TRAIN
// The main job under srun: two ranks on two nodes learn, as under kolorun.
TEST_F(Slurm, TrainFashionMnistUnderSrun) {
  ProcessRun r = run_command(srun("-N2 -n2") + KOLO_TEST_TRAIN +
                                 " --model mlp --epochs 1 --train-subset 6000 --test-subset 1000 "
                                 "--min-accuracy 0.70",
                             110);
  if (r.exit_code == 77 || r.output.find("dataset-fashion-mnist") != std::string::npos)
    GTEST_SKIP() << "no Fashion-MNIST data: " << r.output;
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("(global, 2 rank(s))"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("below --min-accuracy"), std::string::npos) << r.output;
}
#endif

}  // namespace
