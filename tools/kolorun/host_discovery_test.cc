// The discovery script's output format (Horovod's host:slots lines), its errors word for word,
// which names mean this host, and one real run of each kind of script.
#include "tools/kolorun/host_discovery.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>

#include "tools/kolorun/testing/captured_process.h"

namespace kolo::kolorun {
namespace {

using namespace std::chrono_literals;

std::string parse_error(std::string_view output) {
  auto r = parse_hosts(output, "disc.sh");
  EXPECT_FALSE(r.ok());
  return r.ok() ? "" : r.status().message();
}

TEST(HostDiscoveryParse, ReadsHostSlotsLinesAndBareHosts) {
  auto r = parse_hosts("localhost:4\n\n  node-2:0 \r\nnode-3\n", "disc.sh");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(*r, (std::vector<HostSlots>{{"localhost", 4}, {"node-2", 0}, {"node-3", 1}}));
  auto empty = parse_hosts("", "disc.sh");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

TEST(HostDiscoveryParse, GarbageNamesTheScriptTheLineAndTheForm) {
  const std::string form = "expected 'host:slots' or 'host' (slots an integer >= 0)";
  EXPECT_EQ(parse_error("localhost:2\nfoo bar\n"),
            "--host-discovery-script disc.sh printed line 2 'foo bar': " + form);
  EXPECT_EQ(parse_error("localhost:two"),
            "--host-discovery-script disc.sh printed line 1 'localhost:two': " + form);
  EXPECT_EQ(parse_error("localhost:-1"),
            "--host-discovery-script disc.sh printed line 1 'localhost:-1': " + form);
  EXPECT_EQ(parse_error(":3"), "--host-discovery-script disc.sh printed line 1 ':3': " + form);
  EXPECT_EQ(parse_error("a:1:2"),
            "--host-discovery-script disc.sh printed line 1 'a:1:2': " + form);
}

TEST(HostDiscoveryParse, AHostNamedTwiceIsAnError) {
  EXPECT_EQ(parse_error("a:1\nb:2\n\na:3\n"),
            "--host-discovery-script disc.sh printed line 4 'a:3': expected each host once (a is "
            "named on line 1 too)");
}

TEST(HostDiscoveryLocalShare, CountsTheNamesOfThisHostAndListsTheOthers) {
  const std::vector<HostSlots> hosts = {
      {"localhost", 1}, {"node-9", 4}, {"127.0.0.1", 2}, {"me.example.com", 3}, {"me", 1}};
  const LocalShare share = local_share(hosts, "me.example.com");
  EXPECT_EQ(share.slots, 7);
  EXPECT_EQ(share.other_hosts, (std::vector<std::string>{"node-9"}));
}

class HostDiscoveryRun : public ::testing::Test {
 protected:
  std::string script(const std::string& body) {
    const std::string path = dir_.path + "/disc" + std::to_string(++n_) + ".sh";
    std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
    ::chmod(path.c_str(), 0700);
    return path;
  }
  testing::TempDir dir_;
  int n_ = 0;
};

TEST_F(HostDiscoveryRun, ReadsWhatTheScriptPrints) {
  auto r = run_discovery(script("echo localhost:2; echo other:1"), 5s);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(*r, (std::vector<HostSlots>{{"localhost", 2}, {"other", 1}}));
}

TEST_F(HostDiscoveryRun, AFailingScriptIsNamedWithItsStatus) {
  const std::string s = script("echo localhost:2; exit 3");
  auto r = run_discovery(s, 5s);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "--host-discovery-script " + s +
                                      " exited with status 3: expected exit status 0 and one "
                                      "host:slots line per host");
}

TEST_F(HostDiscoveryRun, AHangingScriptIsKilledAtTheTimeout) {
  // Its child keeps stdout open too: the whole group goes.
  const std::string s = script("sleep 30 & sleep 30");
  const auto t0 = std::chrono::steady_clock::now();
  auto r = run_discovery(s, 200ms);
  const auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kTimeout);
  EXPECT_EQ(r.status().message(), "--host-discovery-script " + s +
                                      " did not finish within 200 ms (--discovery-timeout); "
                                      "killed it");
  EXPECT_LT(took, 5s);
}

TEST_F(HostDiscoveryRun, AMissingScriptCannotRun) {
  auto r = run_discovery(dir_.path + "/nope.sh", 1s);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "--host-discovery-script " + dir_.path +
                                      "/nope.sh: cannot run it: No such file or directory");
}

}  // namespace
}  // namespace kolo::kolorun
