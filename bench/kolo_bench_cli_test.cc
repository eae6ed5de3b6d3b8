// Runs the built kolo-bench binary (KOLO_BENCH_BINARY): help, bad command lines, and tiny
// single-rank runs of every subcommand whose --json rows must parse.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "tests/support/run_command.h"

namespace {

using kolo::testing::ProcessRun;
using kolo::testing::run_command;

// A path under the test temp dir, unique to this process.
std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "kolo_bench_cli_" + std::to_string(::getpid()) + "_" + name;
}

// kolo-bench with `args`, alone (no kolorun: a world of one rank), stdout and stderr together.
ProcessRun bench(const std::string& args, const std::string& env = "") {
  return run_command(env + " " + KOLO_BENCH_BINARY + " " + args, 120);
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
}

std::vector<std::string> commands() {
  std::vector<std::string> c = {"allreduce", "allgather", "broadcast", "alltoall", "reducescatter"};
#ifdef KOLO_BENCH_COORDINATOR
  c.push_back("fusion");
  c.push_back("latency");
  c.push_back("elastic");
#endif
  return c;
}

TEST(KoloBenchCli, ToolHelpListsEveryCommand) {
  ProcessRun r = bench("--help");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.rfind("usage: kolo-bench <command> [options]\n", 0), 0u) << r.output;
  for (const std::string& c : commands())
    EXPECT_NE(r.output.find("\n  " + c + " "), std::string::npos) << c << "\n" << r.output;

  r = bench("");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  r = bench("frobnicate");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(r.output.rfind("kolo-bench: unknown command 'frobnicate'\n", 0), 0u) << r.output;
}

TEST(KoloBenchCli, EveryCommandPrintsItsHelpAndRunsNothing) {
  for (const std::string& c : commands()) {
    ProcessRun r = bench(c + " --help");
    EXPECT_EQ(r.exit_code, 0) << c << "\n" << r.output;
    EXPECT_EQ(r.output.rfind("usage: kolo-bench " + c + " [options]\n", 0), 0u) << r.output;
    EXPECT_NE(r.output.find("  --json FILE "), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("  -h, --help "), std::string::npos) << r.output;
    // A run prints its "#" header lines first; help prints none.
    EXPECT_EQ(r.output.find("\n#"), std::string::npos) << r.output;
  }
}

TEST(KoloBenchCli, BadOptionsExit2NamingTheFlagAndRunNothing) {
  struct Case {
    std::string args, message;
  };
  std::vector<Case> cases = {
      {"allreduce -n 0", "kolo-bench allreduce: -n '0' is invalid: expected an integer >= 1\n"},
      {"allreduce -r 0",
       "kolo-bench allreduce: -r '0' is invalid: expected an integer in [1, 1000]\n"},
      {"allgather -b 1MiB -e 1KiB",
       "kolo-bench allgather: -b 1048576 and -e 1024 are invalid: expected -b <= -e\n"},
      {"broadcast --frob", "kolo-bench broadcast: unknown option '--frob' (see --help)\n"},
  };
#ifdef KOLO_BENCH_COORDINATOR
  cases.push_back({"latency --tensors -3",
                   "kolo-bench latency: --tensors '-3' is invalid: expected an integer in [1, "
                   "1000000]\n"});
  cases.push_back({"latency --iters 0",
                   "kolo-bench latency: --iters '0' is invalid: expected an integer >= 1\n"});
  cases.push_back({"fusion --iters 2x",
                   "kolo-bench fusion: --iters '2x' is invalid: expected an integer >= 1\n"});
  cases.push_back(
      {"fusion --warmup", "kolo-bench fusion: --warmup needs a value: an integer >= 0\n"});
  cases.push_back(
      {"fusion --iters 1 --bogus 3", "kolo-bench fusion: unknown option '--bogus' (see --help)\n"});
#endif
  for (const Case& c : cases) {
    ProcessRun r = bench(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.output;
    EXPECT_EQ(r.output, c.message) << c.args;
  }
}

TEST(KoloBenchCli, CollectiveJsonRowsParse) {
  for (const char* c : {"allreduce", "allgather", "broadcast", "alltoall", "reducescatter"}) {
    const std::string json = temp_path(std::string(c) + ".json");
    ProcessRun r = bench(std::string(c) + " -b 16 -e 64 -n 1 -w 0 --check --json " + json);
    ASSERT_EQ(r.exit_code, 0) << c << "\n" << r.output;
    nlohmann::json rows = read_json(json);
    ASSERT_TRUE(rows.is_array()) << c << ": " << rows.dump();
    ASSERT_EQ(rows.size(), 3u) << rows.dump();  // 16, 32 and 64 bytes
    for (size_t i = 0; i < rows.size(); ++i) {
      EXPECT_EQ(rows[i]["collective"], c);
      EXPECT_EQ(rows[i]["ranks"], 1);
      EXPECT_EQ(rows[i]["size_bytes"], 16 << i);
      EXPECT_EQ(rows[i]["count"], 4 << i);
      EXPECT_EQ(rows[i]["type"], "float32");
      EXPECT_EQ(rows[i]["wrong"], 0);
      EXPECT_GT(rows[i]["time_us"].get<double>(), 0.0);
    }
    std::remove(json.c_str());
  }
}

// --copy adds the copy floor to every row: a time, and the collective's time over it.
TEST(KoloBenchCli, CopyAddsTheCopyFloorToEveryRow) {
  const std::string json = temp_path("copy.json");
  ProcessRun r = bench("allreduce -b 4KiB -e 64KiB -f 4 -n 2 -w 1 --copy --json " + json);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("copy(us) kolo/copy\n"), std::string::npos) << r.output;
  nlohmann::json rows = read_json(json);
  ASSERT_TRUE(rows.is_array()) << rows.dump();
  ASSERT_EQ(rows.size(), 3u) << rows.dump();  // 4, 16 and 64 KiB
  for (const auto& row : rows) {
    const double copy = row["copy_time_us"].get<double>();
    EXPECT_GT(copy, 0.0) << row.dump();
    EXPECT_DOUBLE_EQ(row["kolo_over_copy"].get<double>(), row["time_us"].get<double>() / copy)
        << row.dump();
  }
  std::remove(json.c_str());
}

// -r N alternates N rounds of the backend and the references per size and reports medians.
TEST(KoloBenchCli, RoundsAreCountedInTheHeaderAndEveryRow) {
  const std::string json = temp_path("rounds.json");
  ProcessRun r = bench("allreduce -b 4KiB -e 16KiB -f 4 -n 2 -w 1 -r 3 --copy --json " + json);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("# 3 rounds per size, alternating: medians of the rounds' times and "
                          "ratios\n"),
            std::string::npos)
      << r.output;
  nlohmann::json rows = read_json(json);
  ASSERT_TRUE(rows.is_array()) << rows.dump();
  ASSERT_EQ(rows.size(), 2u) << rows.dump();  // 4 and 16 KiB
  for (const auto& row : rows) {
    EXPECT_EQ(row["rounds"], 3) << row.dump();
    EXPECT_GT(row["copy_time_us"].get<double>(), 0.0) << row.dump();
    EXPECT_GT(row["kolo_over_copy"].get<double>(), 0.0) << row.dump();
  }
  std::remove(json.c_str());
}

TEST(KoloBenchCli, AnUnwritableJsonFileFailsTheRun) {
  ProcessRun r = bench("allreduce -b 16 -e 16 -n 1 -w 0 --json /nonexistent-kolo-dir/rows.json");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("kolo-bench allreduce: IoError: --json: cannot write "
                          "'/nonexistent-kolo-dir/rows.json': No such file or directory\n"),
            std::string::npos)
      << r.output;
}

#ifdef KOLO_BENCH_COORDINATOR

TEST(KoloBenchCli, LatencyJsonRowsParse) {
  const std::string json = temp_path("latency.json");
  ProcessRun r = bench("latency --iters 2 --warmup 0 --tensors 3 --json " + json);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("3 x 4 B tensors/s (cached step)"), std::string::npos) << r.output;
  nlohmann::json rows = read_json(json);
  ASSERT_TRUE(rows.is_array()) << rows.dump();
  // One rank: no raw backend row.
  ASSERT_EQ(rows.size(), 2u) << rows.dump();
  EXPECT_EQ(rows[0]["measurement"], "coordinator allreduce 4 B, median us");
  EXPECT_EQ(rows[0]["unit"], "us");
  EXPECT_EQ(rows[1]["measurement"], "3 x 4 B tensors/s (cached step)");
  EXPECT_EQ(rows[1]["unit"], "tensors/s");
  for (const auto& row : rows) {
    EXPECT_EQ(row["ranks"], 1);
    EXPECT_GT(row["value"].get<double>(), 0.0);
  }
  std::remove(json.c_str());
}

TEST(KoloBenchCli, ElasticJsonRowsParse) {
  const std::string json = temp_path("elastic.json");
  ProcessRun r = bench("elastic --iters 2 --model cnn --json " + json);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  nlohmann::json rows = read_json(json);
  ASSERT_TRUE(rows.is_array() && rows.size() == 1u) << rows.dump();
  // The CNN of examples/train_fashion_mnist: 206,922 parameters, and as many momentum values.
  EXPECT_EQ(rows[0]["model"], "cnn");
  EXPECT_EQ(rows[0]["tensors"], 16);
  EXPECT_EQ(rows[0]["elements"], 2 * 206922);
  EXPECT_EQ(rows[0]["bytes"].get<double>(), 4.0 * 2 * 206922);
  for (const char* field : {"first_commit_ms", "commit_ms", "commit_GBps", "restore_ms", "sync_ms"})
    EXPECT_GT(rows[0][field].get<double>(), 0.0) << field;
  r = bench("elastic --model vgg");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("kolo-bench elastic: --model 'vgg' is invalid: expected one of all, mlp, "
                          "cnn, resnet50"),
            std::string::npos)
      << r.output;
  std::remove(json.c_str());
}

TEST(KoloBenchCli, FusionJsonRowsParse) {
  const std::string json = temp_path("fusion.json");
  ProcessRun r = bench("fusion --iters 1 --warmup 0 --json " + json);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  nlohmann::json rows = read_json(json);
  ASSERT_TRUE(rows.is_array()) << rows.dump();
  ASSERT_EQ(rows.size(), 5u) << rows.dump();
  // The flat row comes from the default row's session (a flat allreduce after each step).
  const char* modes[] = {"fusion default", "flat 102 MB allreduce", "fusion off",
                         "fusion default + timeline"};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(rows[i]["mode"], modes[i]);
    EXPECT_EQ(rows[i]["ranks"], 1);
    EXPECT_EQ(rows[i]["timeline"], i == 3);
    EXPECT_GT(rows[i]["step_ms"].get<double>(), 0.0);
  }
  EXPECT_EQ(rows[2]["fusion_threshold"], "0");
  EXPECT_EQ(rows[4]["mode"], "fusion default / flat, paired steps");
  EXPECT_GT(rows[4]["ratio"].get<double>(), 0.0);
  std::remove(json.c_str());
}

// init() starts the KOLO_TIMELINE timeline itself; the timeline row must use it rather than
// fail with "already started", and the file must hold a trace of that row.
TEST(KoloBenchCli, FusionUnderKoloTimelineRecordsTheTimelineRowThere) {
  const std::string trace = temp_path("fusion_trace.json");
  ProcessRun r = bench("fusion --iters 1 --warmup 0", "KOLO_TIMELINE=" + trace);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("# KOLO_TIMELINE=" + trace +
                          ": the timeline row records there; the other rows run without it\n"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("already started"), std::string::npos) << r.output;
  nlohmann::json events = read_json(trace);
  ASSERT_TRUE(events.is_array()) << "not a JSON array: " << trace;
  // The step's 161 gradients appear in the trace (one name per tensor).
  EXPECT_NE(events.dump().find("\"grad.160\""), std::string::npos);
  std::remove(trace.c_str());
}

#endif  // KOLO_BENCH_COORDINATOR

}  // namespace
