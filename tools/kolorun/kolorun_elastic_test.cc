// kolorun's elastic jobs end to end: real kolorun processes starting real workers
// (testing/kolorun_elastic_child.cc, which speaks the protocol over the store itself), plus the
// elastic flags. Every wait is bounded; no sleep stands in for an assertion.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "tools/kolorun/host_discovery.h"
#include "tools/kolorun/options.h"
#include "tools/kolorun/testing/captured_process.h"

namespace kolo::kolorun {
namespace {

using namespace std::chrono_literals;
using testing::exit_code;
using testing::Proc;
using testing::TempDir;
const std::string kKolorun = KOLORUN_PATH;
const std::string kWorker = KOLORUN_ELASTIC_CHILD_PATH;

std::vector<std::string> kolorun(std::vector<std::string> flags, std::vector<std::string> worker) {
  std::vector<std::string> args{kKolorun, "--grace", "500ms"};
  args.insert(args.end(), flags.begin(), flags.end());
  args.push_back(kWorker);
  args.insert(args.end(), worker.begin(), worker.end());
  return args;
}

std::string parse_error(const std::vector<std::string>& args) {
  auto r = parse_options(args);
  EXPECT_FALSE(r.ok());
  return r.ok() ? "" : r.status().message();
}

// ---- flags ----

TEST(KolorunElasticOptions, AnyElasticFlagMakesTheJobElasticWithBoundsFromNp) {
  auto fixed = parse_options({"-np", "4", "train"});
  ASSERT_TRUE(fixed.ok());
  EXPECT_FALSE(fixed->elastic);
  auto o = parse_options({"-np", "4", "--respawn", "train"});
  ASSERT_TRUE(o.ok()) << o.status().message();
  ASSERT_TRUE(o->elastic);
  EXPECT_EQ(o->elastic->min_np, 4);
  EXPECT_EQ(o->elastic->max_np, 4);
  EXPECT_TRUE(o->elastic->respawn);
  EXPECT_EQ(o->elastic->blacklist_after, 3);
  EXPECT_EQ(o->elastic->discovery_interval, 1000ms);
  auto all = parse_options({"-np", "4", "--min-np", "2", "--max-np=6", "--host-discovery-script",
                            "/d.sh", "--discovery-interval", "250ms", "--discovery-timeout=2s",
                            "--blacklist-after", "5", "train", "--min-np", "9"});
  ASSERT_TRUE(all.ok()) << all.status().message();
  EXPECT_EQ(all->elastic->min_np, 2);
  EXPECT_EQ(all->elastic->max_np, 6);
  EXPECT_FALSE(all->elastic->respawn);
  EXPECT_EQ(all->elastic->discovery_script, "/d.sh");
  EXPECT_EQ(all->elastic->discovery_interval, 250ms);
  EXPECT_EQ(all->elastic->discovery_timeout, 2000ms);
  EXPECT_EQ(all->elastic->blacklist_after, 5);
  EXPECT_EQ(all->command, (std::vector<std::string>{"train", "--min-np", "9"}));
}

TEST(KolorunElasticOptions, BadBoundsNameTheFlagTheValueAndWhatWasExpected) {
  EXPECT_EQ(parse_error({"-np", "4", "--min-np", "0", "t"}),
            "--min-np 0 is invalid: expected an integer >= 1");
  EXPECT_EQ(parse_error({"-np", "4", "--min-np", "5", "t"}),
            "--min-np 5 is invalid: expected an integer in [1, -np 4]: the job starts with -np "
            "workers");
  EXPECT_EQ(parse_error({"-np", "4", "--max-np", "3", "t"}),
            "--max-np 3 is invalid: expected an integer >= -np 4: the job starts with -np workers");
  EXPECT_EQ(parse_error({"-np", "4", "--discovery-interval", "0s", "t"}),
            "--discovery-interval 0s is invalid: expected a duration above 0, such as 1s or 500ms");
  EXPECT_EQ(parse_error({"-np", "4", "--discovery-interval", "soon", "t"}),
            "--discovery-interval soon is invalid: expected a duration such as 30s, 500ms or 2min");
  EXPECT_EQ(parse_error({"-np", "4", "--blacklist-after", "0", "t"}),
            "--blacklist-after 0 is invalid: expected an integer >= 1");
  EXPECT_EQ(parse_error({"-np", "4", "--host-discovery-script", "", "t"}),
            "--host-discovery-script \"\" is invalid: expected the path of an executable that "
            "prints host:slots lines");
}

TEST(KolorunElasticOptions, SeveralNodesCountMinAndMaxNpOverTheJob) {
  auto o = parse_options({"-np", "2", "--nnodes", "2", "--rdzv", "h:29400", "--min-np", "3", "t"});
  ASSERT_TRUE(o.ok()) << o.status().message();
  EXPECT_EQ(o->elastic->min_np, 3);
  EXPECT_EQ(o->elastic->max_np, 4);  // -np x --nnodes
  EXPECT_EQ(parse_error({"-np", "2", "--nnodes", "2", "--rdzv", "h:29400", "--min-np", "5", "t"}),
            "--min-np 5 is invalid: expected an integer in [1, -np 2 x --nnodes 2 = 4]: the job "
            "starts with that many workers");
  // A node that joins later has a node rank past --nnodes; without elastic flags it is refused.
  EXPECT_TRUE(parse_options({"-np", "2", "--nnodes", "1", "--node-rank", "1", "--rdzv", "h:29400",
                             "--min-np", "2", "t"})
                  .ok());
  EXPECT_EQ(parse_error({"-np", "2", "--nnodes", "1", "--node-rank", "1", "--rdzv", "h:1", "t"}),
            "--node-rank 1 is invalid: expected an integer in [0, --nnodes=1)");
}

// ---- jobs ----

TEST(KolorunElastic, WorkersHaveAWorkerIdAndNoRank) {
  Proc p(kolorun({"-np", "2", "--min-np", "1"}, {"env"}));
  EXPECT_EQ(exit_code(p.finish(20s)), 0) << p.err();
  for (const std::string w : {"0", "1"}) {
    const std::vector<std::string> lines = {"KOLO_ELASTIC_WORKER=" + w, "KOLO_RANK=<unset>",
                                            "KOLO_SIZE=<unset>",        "KOLO_LOCAL_RANK=<unset>",
                                            "KOLO_CROSS_SIZE=<unset>",  "KOLO_SECRET=set"};
    for (const std::string& line : lines)
      EXPECT_NE(p.out().find("[" + w + "] " + line + "\n"), std::string::npos) << line << p.out();
  }
}

TEST(KolorunElastic, AFailedWorkerLeavesTheSurvivorsTheNextGeneration) {
  Proc p(kolorun({"-np", "4", "--min-np", "2"}, {"follow", "exit=2:1", "done=0,1,3"}));
  EXPECT_EQ(exit_code(p.finish(20s)), 0) << p.err();
  EXPECT_NE(p.out().find("[0] joined generation 1 as rank 0 of 3 (workers 0, 1, 3)\n"),
            std::string::npos)
      << p.out();
  EXPECT_NE(p.out().find("[1] joined generation 1 as rank 1 of 3 (workers 0, 1, 3)\n"),
            std::string::npos);
  EXPECT_NE(p.out().find("[3] joined generation 1 as rank 2 of 3 (workers 0, 1, 3)\n"),
            std::string::npos);
  EXPECT_TRUE(std::regex_search(
      p.err(), std::regex(R"(kolorun: worker 2 \(pid \d+\) exited with status 1\n)")))
      << p.err();
  EXPECT_NE(p.err().find("kolorun: generation 1: 3 ranks, workers 0, 1, 3\n"), std::string::npos);
}

// The issue's goal: the survivors of a kill train again within a second.
TEST(KolorunElastic, SurvivorsOfAKillAreInTheNextGenerationWithinASecond) {
  Proc p(kolorun({"-np", "3", "--min-np", "2"}, {"follow", "until=1"}));
  ASSERT_TRUE(p.wait_for_stdout("joined generation 0", 3, 20s)) << p.out();
  std::smatch m;
  ASSERT_TRUE(std::regex_search(p.out(), m, std::regex(R"(\[1\] pid (\d+)\n)"))) << p.out();
  const auto killed = std::chrono::steady_clock::now();
  ASSERT_EQ(::kill(std::stoi(m[1]), SIGKILL), 0);
  ASSERT_TRUE(p.wait_for_stdout("joined generation 1 as rank", 2, 20s)) << p.out();
  EXPECT_LT(std::chrono::steady_clock::now() - killed, 1s);
  EXPECT_EQ(exit_code(p.finish(20s)), 0) << p.err();
  EXPECT_NE(p.out().find("[2] joined generation 1 as rank 1 of 2 (workers 0, 2)\n"),
            std::string::npos)
      << p.out();
}

TEST(KolorunElastic, RespawnStartsAReplacementThatJoinsALaterGeneration) {
  Proc p(kolorun({"-np", "3", "--min-np", "2", "--respawn"}, {"follow", "exit=1:1", "done=0,2,3"}));
  EXPECT_EQ(exit_code(p.finish(20s)), 0) << p.err();
  EXPECT_TRUE(std::regex_search(
      p.err(),
      std::regex(
          R"(kolorun: worker 1 \(pid \d+\) exited with status 1; starting worker 3 in its place\n)")))
      << p.err();
  // Worker 3 is named once it has set its ready key; survivors keep their order before it.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      p.out(), m,
      std::regex(R"(\[3\] joined generation (\d+) as rank 2 of 3 \(workers 0, 2, 3\)\n)")))
      << p.out();
  EXPECT_GE(std::stoi(m[1]), 1);
  EXPECT_NE(p.out().find("[0] joined generation " + m[1].str() + " as rank 0 of 3"),
            std::string::npos);
}

TEST(KolorunElastic, AReformRequestOfTheNewestGenerationFormsTheNext) {
  Proc p(kolorun({"-np", "2", "--min-np", "2"}, {"follow", "ask=1", "until=1"}));
  EXPECT_EQ(exit_code(p.finish(20s)), 0) << p.err();
  EXPECT_NE(p.out().find("[0] joined generation 1 as rank 0 of 2 (workers 0, 1)\n"),
            std::string::npos)
      << p.out();
  EXPECT_NE(p.err().find("kolorun: generation 1: 2 ranks, workers 0, 1\n"), std::string::npos);
  EXPECT_EQ(p.err().find("generation 2"), std::string::npos) << p.err();
}

TEST(KolorunElastic, FewerThanMinNpEndsEveryWorkerAndKolorunWithOneMessage) {
  const auto t0 = std::chrono::steady_clock::now();
  Proc p(kolorun({"-np", "2", "--min-np", "2"}, {"follow", "kill=1"}));
  EXPECT_EQ(exit_code(p.finish(20s)), 1) << p.err();
  const std::string message =
      "kolorun: 1 rank left, fewer than --min-np 2: lost worker 1 (rank 1 of generation 0, was "
      "killed by signal 9 (SIGKILL)); survivors: worker 0 (rank 0)";
  EXPECT_NE(p.err().find("\n" + message + "\n"), std::string::npos) << p.err();
  // The survivor's wait ended with kolorun's message; it was not stopped by a signal.
  EXPECT_NE(p.out().find("[0] end: " + message + "\n"), std::string::npos) << p.out();
  EXPECT_EQ(p.err().find("SIGKILL after"), std::string::npos) << p.err();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
}

TEST(KolorunElastic, AHostWhoseWorkersKeepFailingGetsNoMore) {
  Proc p(kolorun({"-np", "2", "--min-np", "1", "--respawn", "--blacklist-after", "3"},
                 {"follow", "fail-from=1:1"}));
  // Workers 1, 2 (1's replacement) and 3 (2's) fail: the third failure blacklists the host.
  const std::string said = " exited with status 1; host " + this_hostname() +
                           " gets no new workers: 3 of its workers failed (--blacklist-after 3)\n";
  ASSERT_TRUE(p.wait_for_stderr(said, 1, 20s)) << p.err();
  EXPECT_TRUE(std::regex_search(p.err(), std::regex(R"(kolorun: worker 3 \(pid \d+\) exited)")));
  EXPECT_NE(p.err().find("starting worker 3 in its place"), std::string::npos);
  EXPECT_EQ(p.err().find("starting worker 4"), std::string::npos);
  p.signal(SIGTERM);  // worker 0 alone follows on
  EXPECT_EQ(exit_code(p.finish(20s)), 128 + SIGTERM) << p.err();
  EXPECT_EQ(p.err().find("starting worker 4"), std::string::npos) << p.err();
}

TEST(KolorunElastic, SigintEndsTheJobAndIsForwarded) {
  Proc p(kolorun({"-np", "2", "--min-np", "1"}, {"follow"}));
  ASSERT_TRUE(p.wait_for_stdout("joined generation 0", 2, 20s)) << p.out();
  p.signal(SIGINT);
  EXPECT_EQ(exit_code(p.finish(20s)), 128 + SIGINT) << p.err();
  EXPECT_NE(p.err().find("kolorun: got SIGINT; forwarding it to 2 worker(s)\n"), std::string::npos)
      << p.err();
}

TEST(KolorunElastic, ACommandThatCannotStartIsNamedWithTheWorker) {
  Proc p({kKolorun, "-np", "2", "--min-np", "1", "/nonexistent/train"});
  EXPECT_EQ(exit_code(p.finish(20s)), 1);
  EXPECT_EQ(p.err(),
            "kolorun: cannot start worker 0: /nonexistent/train: No such file or directory\n");
}

// ---- discovery ----

class KolorunDiscovery : public ::testing::Test {
 protected:
  // A script that prints the hosts file the test rewrites (atomically: a rename).
  KolorunDiscovery() {
    std::ofstream(script_) << "#!/bin/sh\ncat " << hosts_ << "\n";
    ::chmod(script_.c_str(), 0700);
  }
  void hosts(const std::string& text) {
    const std::string tmp = hosts_ + ".new";
    std::ofstream(tmp) << text;
    std::filesystem::rename(tmp, hosts_);
  }
  std::string bad_script(const std::string& body) {
    const std::string path = dir_.path + "/bad.sh";
    std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
    ::chmod(path.c_str(), 0700);
    return path;
  }
  TempDir dir_;
  const std::string hosts_ = dir_.path + "/hosts";
  const std::string script_ = dir_.path + "/discover.sh";
};

TEST_F(KolorunDiscovery, BadOutputAtStartStartsNothingAndNamesTheLine) {
  hosts("localhost:2\nnot a host\n");
  Proc garbage(kolorun({"-np", "2", "--min-np", "1", "--host-discovery-script", script_}, {"env"}));
  EXPECT_EQ(exit_code(garbage.finish(20s)), 2);
  EXPECT_EQ(garbage.err(), "kolorun: --host-discovery-script " + script_ +
                               " printed line 2 'not a host': expected 'host:slots' or 'host' "
                               "(slots an integer >= 0); nothing was started\n");
  EXPECT_EQ(garbage.out(), "");
  hosts("localhost:2\n127.0.0.1:1\nlocalhost\n");
  Proc twice(kolorun({"-np", "2", "--min-np", "1", "--host-discovery-script", script_}, {"env"}));
  EXPECT_EQ(exit_code(twice.finish(20s)), 2);
  EXPECT_EQ(twice.err(), "kolorun: --host-discovery-script " + script_ +
                             " printed line 3 'localhost': expected each host once (localhost is "
                             "named on line 1 too); nothing was started\n");
  EXPECT_EQ(twice.out(), "");
}

TEST_F(KolorunDiscovery, AScriptThatFailsOrHangsAtStartStartsNothing) {
  const std::string failing = bad_script("echo localhost:2; exit 4");
  Proc fails(kolorun({"-np", "2", "--min-np", "1", "--host-discovery-script", failing}, {"env"}));
  EXPECT_EQ(exit_code(fails.finish(20s)), 2);
  EXPECT_EQ(fails.err(), "kolorun: --host-discovery-script " + failing +
                             " exited with status 4: expected exit status 0 and one host:slots "
                             "line per host; nothing was started\n");
  const std::string hanging = bad_script("sleep 60");
  Proc hangs(kolorun({"-np", "2", "--min-np", "1", "--host-discovery-script", hanging,
                      "--discovery-timeout", "300ms"},
                     {"env"}));
  EXPECT_EQ(exit_code(hangs.finish(20s)), 2);
  EXPECT_EQ(hangs.err(), "kolorun: --host-discovery-script " + hanging +
                             " did not finish within 300 ms (--discovery-timeout); killed it; "
                             "nothing was started\n");
  EXPECT_EQ(hangs.out(), "");
  hosts("localhost:1\n");
  Proc few(kolorun({"-np", "3", "--min-np", "2", "--host-discovery-script", script_}, {"env"}));
  EXPECT_EQ(exit_code(few.finish(20s)), 2);
  EXPECT_NE(few.err().find("lists 1 slots on this host"), std::string::npos) << few.err();
  EXPECT_NE(few.err().find("fewer than --min-np 2; nothing was started\n"), std::string::npos);
}

TEST_F(KolorunDiscovery, WorkersFollowTheSlotsAndAFailingRunKeepsTheWorld) {
  hosts("localhost:3\nfar-away:8\n");
  Proc p(kolorun({"-np", "2", "--min-np", "1", "--max-np", "4", "--host-discovery-script", script_,
                  "--discovery-interval", "50ms"},
                 {"follow", "until=3"}));
  // -np 2 start; the first periodic run finds a third slot here: worker 2 joins.
  ASSERT_TRUE(p.wait_for_stderr("kolorun: generation 1: 3 ranks, workers 0, 1, 2\n", 1, 20s))
      << p.err();
  hosts("localhost:3\nlocalhost:1\n");
  ASSERT_TRUE(p.wait_for_stderr("the workers stay as they are\n", 1, 20s)) << p.err();
  hosts("localhost:2\n");  // the newest worker leaves; the world re-forms without it
  ASSERT_TRUE(p.wait_for_stderr("kolorun: generation 2: 2 ranks, workers 0, 1\n", 1, 20s))
      << p.err();
  EXPECT_NE(p.err().find("kolorun: stopping worker 2: the discovery script lists 2 slots on this "
                         "host\n"),
            std::string::npos);
  hosts("localhost:4\n");  // two more: workers 3 and 4, one generation
  EXPECT_EQ(exit_code(p.finish(20s)), 0) << p.err();
  EXPECT_NE(p.err().find("kolorun: generation 3: 4 ranks, workers 0, 1, 3, 4\n"), std::string::npos)
      << p.err();
  EXPECT_NE(p.err().find("kolorun: warning: the discovery script lists other hosts (far-away): "
                         "kolorun cannot start ranks on other hosts yet; it uses this host's "
                         "slots only\n"),
            std::string::npos);
  const std::string failed_run = "printed line 2 'localhost:1': expected each host once";
  EXPECT_NE(p.err().find(failed_run), std::string::npos);
  EXPECT_EQ(p.err().find(failed_run), p.err().rfind(failed_run)) << "warned more than once";
}

}  // namespace
}  // namespace kolo::kolorun
