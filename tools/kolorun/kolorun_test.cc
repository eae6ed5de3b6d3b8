// kolorun end to end: real kolorun processes starting real rank processes
// (testing/kolorun_test_child.cc), plus the pure parts (flags, line prefixing).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "common/knobs.h"
#include "rendezvous/asio.h"
#include "rendezvous/tcp_store.h"
#include "rendezvous/tcp_store_protocol.h"
#include "tests/support/process_state.h"
#include "tools/kolorun/cpu_binding.h"
#include "tools/kolorun/line_prefixer.h"
#include "tools/kolorun/options.h"
#include "tools/kolorun/supervisor.h"
#include "tools/kolorun/testing/captured_process.h"

extern char** environ;

namespace kolo::kolorun {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::exit_code;
using testing::Proc;
using testing::TempDir;
const std::string kKolorun = KOLORUN_PATH;
const std::string kChild = KOLORUN_TEST_CHILD_PATH;
const std::string kKoloChild = KOLORUN_KOLO_CHILD_PATH;

// rank -> (variable -> value), from "[r] NAME=value" lines.
std::map<int, std::map<std::string, std::string>> parse_env_lines(const std::string& out) {
  std::map<int, std::map<std::string, std::string>> by_rank;
  std::regex line(R"(^\[(\d+)\] ([A-Z_]+)=(.*)$)");
  std::istringstream in(out);
  std::string l;
  while (std::getline(in, l)) {
    std::smatch m;
    if (std::regex_match(l, m, line)) by_rank[std::stoi(m[1])][m[2]] = m[3];
  }
  return by_rank;
}

// Shell code that waits until the given ranks have created their READY_DIR markers.
std::string wait_ready(const std::string& dir, std::initializer_list<int> ranks) {
  std::string cond;
  for (int r : ranks)
    cond += (cond.empty() ? "" : " || ") + std::string("[ ! -e ") + dir + "/" + std::to_string(r) +
            " ]";
  return "while " + cond + "; do sleep 0.02; done; ";
}

// A file holding `secret`, readable by its owner only (what --secret-file accepts).
struct SecretFile {
  TempDir dir;
  std::string path = dir.path + "/secret";
  explicit SecretFile(const std::string& secret, mode_t mode = 0600) {
    std::ofstream(path) << secret << "\n";
    ::chmod(path.c_str(), mode);
  }
};

// The arguments of node k of a two-node job on this host, then `tail` (the command).
std::vector<std::string> node_args(int k, const std::string& rdzv, const std::string& secret_path,
                                   int np, std::vector<std::string> tail) {
  std::vector<std::string> args{
      kKolorun, "--nnodes",      "2",         "--node-rank", std::to_string(k), "--rdzv",
      rdzv,     "--secret-file", secret_path, "-np",         std::to_string(np)};
  args.insert(args.end(), tail.begin(), tail.end());
  return args;
}

int free_port() { return TcpStoreServer::start("127.0.0.1", 0, "port-finder").value()->port(); }

// Connects to 127.0.0.1:port and writes `bytes` (no handshake), then waits for the close.
void asio_raw_send(int port, const std::string& bytes) {
  boost::asio::io_context io;
  boost::asio::ip::tcp::socket sock(io);
  boost::system::error_code ec;
  sock.connect({boost::asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)}, ec);
  ASSERT_FALSE(ec) << ec.message();
  boost::asio::write(sock, boost::asio::buffer(bytes), ec);
  char c;
  EXPECT_EQ(sock.read_some(boost::asio::buffer(&c, 1), ec), 0u);  // closed, nothing answered
  EXPECT_TRUE(ec);
}

// ---- pure parts ----

std::string parse_error(const std::vector<std::string>& args) {
  auto r = parse_options(args);
  EXPECT_FALSE(r.ok());
  return r.ok() ? "" : r.status().message();
}

TEST(KolorunOptions, ParsesEveryFlag) {
  auto o = parse_options({"-np",
                          "2",
                          "--nnodes=3",
                          "--node-rank",
                          "1",
                          "--rdzv",
                          "h:29500",
                          "--timeout",
                          "2s",
                          "--grace",
                          "100ms",
                          "--secret",
                          "abc",
                          "--no-tag-output",
                          "--bind-to",
                          "none",
                          "-x",
                          "A=b=c",
                          "--fusion-threshold",
                          "64MiB",
                          "--timeline-mark-cycles",
                          "prog",
                          "-np",
                          "9"});
  ASSERT_TRUE(o.ok()) << o.status().to_string();
  EXPECT_EQ(o->np, 2);
  EXPECT_EQ(o->nnodes, 3);
  EXPECT_EQ(o->node_rank, 1);
  EXPECT_EQ(o->rdzv->to_string(), "h:29500");
  EXPECT_EQ(o->knob_flags.at("KOLO_RENDEZVOUS_TIMEOUT"), "2s");  // --timeout is its flag
  EXPECT_EQ(o->grace, 100ms);
  EXPECT_EQ(*o->secret, "abc");
  EXPECT_FALSE(o->tag_output);
  EXPECT_EQ(o->bind_to, BindTo::kNone);
  EXPECT_EQ(parse_options({"-np", "1", "p"})->bind_to, BindTo::kAuto);
  EXPECT_EQ(o->env.at("A"), "b=c");
  EXPECT_EQ(o->knob_flags.at("KOLO_FUSION_THRESHOLD"), "64MiB");
  EXPECT_EQ(o->knob_flags.at("KOLO_TIMELINE_MARK_CYCLES"), "1");
  EXPECT_EQ(o->print_config, PrintConfig::kNo);
  EXPECT_EQ(o->command, (std::vector<std::string>{"prog", "-np", "9"}));
}

TEST(KolorunOptions, RejectsBadFlagsNamingFlagValueAndForm) {
  EXPECT_EQ(parse_error({"prog"}),
            "-np N (the processes on this node) or --np-total N (in the whole job) is required");
  EXPECT_EQ(parse_error({"-np", "0", "prog"}), "-np 0 is invalid: expected an integer >= 1");
  EXPECT_EQ(parse_error({"-np", "x", "prog"}), "-np x is invalid: expected an integer >= 1");
  EXPECT_EQ(parse_error({"-np", "2"}), "no command given: kolorun [options] -np N cmd args...");
  EXPECT_EQ(parse_error({"-np"}), "-np needs a value (kolorun --help lists the forms)");
  EXPECT_EQ(parse_error({"-np", "2", "--bogus", "prog"}),
            "unknown option --bogus (kolorun --help lists the options)");
  EXPECT_EQ(parse_error({"-np", "2", "--timeout", "soon", "prog"}),
            "--timeout soon is invalid: expected a duration with an optional unit (ns, us, ms, s, "
            "min, h; none: seconds) in [1.0 ms, 604800.0 s], e.g. 5ms");
  EXPECT_EQ(parse_error({"-np", "2", "--timeout", "0", "prog"}),
            "--timeout 0 is invalid: expected a duration with an optional unit (ns, us, ms, s, "
            "min, h; none: seconds) in [1.0 ms, 604800.0 s], e.g. 5ms");
  EXPECT_EQ(parse_error({"-np", "2", "--nnodes", "2", "--node-rank", "2", "--rdzv", "h:1", "p"}),
            "--node-rank 2 is invalid: expected an integer in [0, --nnodes=2)");
  EXPECT_EQ(parse_error({"-np", "2", "--nnodes", "2", "p"}),
            "--nnodes 2 needs --rdzv HOST:PORT: the address node 0 serves the store on and the "
            "other nodes connect to");
  EXPECT_EQ(parse_error({"-np", "2", "--log-level", "loud", "p"}),
            "--log-level loud is invalid: expected one of trace, debug, info, warning, error, off");
  EXPECT_EQ(parse_error({"-np", "2", "--fusion-threshold", "big", "p"}),
            "--fusion-threshold big is invalid: expected a size with an optional unit (B, KB, "
            "KiB, MB, MiB, GB, GiB, TB, TiB), e.g. 64MiB");
  EXPECT_EQ(parse_error({"-np", "2", "--tcp-unix=2", "p"}),
            "--tcp-unix 2 is invalid: expected 1/true/yes/on or 0/false/no/off");
  EXPECT_EQ(parse_error({"-np", "2", "--cpu-operations", "gloo", "p"})
                .rfind("--cpu-operations gloo is invalid: expected one of ", 0),
            0u);
  EXPECT_EQ(parse_error({"-np", "2", "--bind-to", "sockets", "p"}),
            "--bind-to: expected auto, cores or none, got 'sockets'");
  EXPECT_NE(parse_error({"-np", "2", "--rdzv", "nohost", "p"}).find("expected HOST:PORT"),
            std::string::npos);
}

TEST(KolorunOptions, EveryUserKnobIsAFlagAndBoolFlagsNeedNoValue) {
  for (const Knob& k : all_knobs()) {
    if (k.category == KnobCategory::kLauncher) continue;
    const std::string value = !k.default_text.empty()         ? std::string(k.default_text)
                              : k.kind == KnobKind::kChoice   ? std::string(k.choices().front())
                              : k.kind == KnobKind::kRange    ? "100:120"  // --timeline-steps
                              : k.kind == KnobKind::kRankSets ? "0"        // --process-sets
                                                              : "x";
    auto o = parse_options({"-np", "1", flag_name(k) + "=" + value, "prog"});
    ASSERT_TRUE(o.ok()) << k.name << ": " << o.status().to_string();
    EXPECT_EQ(o->knob_flags.at(std::string(k.name)), value);
    EXPECT_NE(usage().find("  " + flag_name(k)), std::string::npos) << k.name;
  }
  auto o = parse_options({"-np", "1", "--tcp-unix", "--tcp-spin", "5us", "prog", "--tcp-unix"});
  ASSERT_TRUE(o.ok()) << o.status().to_string();
  EXPECT_EQ(o->knob_flags.at("KOLO_TCP_UNIX"), "1");
  EXPECT_EQ(o->knob_flags.at("KOLO_TCP_SPIN"), "5us");
  EXPECT_EQ(o->command, (std::vector<std::string>{"prog", "--tcp-unix"}));
  EXPECT_EQ(parse_error({"-np", "1", "--rank", "3", "prog"}),
            "unknown option --rank (kolorun --help lists the options)");
}

// Issue 33 item 5: -np is per node (a Horovod user reads it as the job's total); --np-total
// gives the total, split evenly over the nodes.
TEST(KolorunOptions, NpCountsOneNodeAndNpTotalTheJob) {
  auto o = parse_options({"--np-total", "8", "--nnodes", "2", "--rdzv", "h:1", "prog"});
  ASSERT_TRUE(o.ok()) << o.status().to_string();
  EXPECT_EQ(o->np, 4);
  EXPECT_EQ(o->np_total, 8);
  EXPECT_EQ(parse_options({"--np-total=3", "prog"})->np, 3);
  EXPECT_EQ(parse_options({"-np", "8", "--nnodes", "2", "--rdzv", "h:1", "prog"})->np, 8);
  EXPECT_EQ(parse_error({"--np-total", "6", "--nnodes", "4", "--rdzv", "h:1", "prog"}),
            "--np-total 6 does not divide evenly over --nnodes 4: give a multiple of 4, or -np N, "
            "the processes of each node");
  EXPECT_EQ(parse_error({"-np", "2", "--np-total", "4", "prog"}),
            "-np 2 and --np-total 4 are both given: -np counts the processes of one node, "
            "--np-total those of the whole job; give one");
  EXPECT_EQ(parse_error({"--np-total", "0", "prog"}),
            "--np-total 0 is invalid: expected an integer >= 1");
  // --help says so wherever --nnodes appears.
  const std::string help = usage();
  EXPECT_NE(help.find("processes on this node, not in the job: with --nnodes M the job has\n"
                      "                         M*N ranks"),
            std::string::npos)
      << help;
  EXPECT_NE(help.find("--nnodes M             nodes in the job (default 1); run one kolorun per "
                      "node, each with the\n                         same -np N (per node)"),
            std::string::npos)
      << help;
}

TEST(KolorunOptions, PrintConfigNeedsNoCommand) {
  auto o = parse_options({"--print-config", "--cycle-time=2ms"});
  ASSERT_TRUE(o.ok()) << o.status().to_string();
  EXPECT_EQ(o->print_config, PrintConfig::kValues);
  EXPECT_EQ(parse_options({"--print-config=markdown"})->print_config, PrintConfig::kMarkdown);
}

TEST(CpuBinding, SharesTheAllowedCpusOutInContiguousBlocks) {
  using Plan = std::vector<std::vector<int>>;
  const std::vector<int> five = {0, 1, 2, 3, 4};
  EXPECT_EQ(plan_binding(five, 2, BindTo::kAuto).value(), (Plan{{0, 1, 2}, {3, 4}}));
  EXPECT_EQ(plan_binding(five, 5, BindTo::kCores).value(), (Plan{{0}, {1}, {2}, {3}, {4}}));
  EXPECT_EQ(plan_binding({2, 5, 7}, 2, BindTo::kAuto).value(), (Plan{{2, 5}, {7}}));
  // More ranks than CPUs: auto leaves the scheduler free, cores refuses.
  EXPECT_EQ(plan_binding(five, 6, BindTo::kAuto).value(), Plan(6));
  EXPECT_EQ(plan_binding(five, 6, BindTo::kCores).status().message(),
            "--bind-to cores needs a CPU per rank: -np 6 but kolorun may use 5 CPU(s) (0-4); use "
            "--bind-to none to oversubscribe");
  EXPECT_EQ(plan_binding(five, 2, BindTo::kNone).value(), Plan(2));
  EXPECT_EQ(format_cpu_list({0, 1, 2, 5, 7, 8}), "0-2,5,7-8");
}

TEST(CpuBinding, AScopedMaskIsRestoredAndARefusedOneChangesNothing) {
  const std::vector<int> before = allowed_cpus();
  {
    ScopedThreadAffinity one({before.front()});
    ASSERT_TRUE(one.status().ok()) << one.status().to_string();
    EXPECT_EQ(allowed_cpus(), std::vector<int>{before.front()});
  }
  EXPECT_EQ(allowed_cpus(), before);
  {
    ScopedThreadAffinity bad({1 << 20});  // beyond any cpu_set_t
    EXPECT_EQ(bad.status().message(), "CPU 1048576 is out of range");
    EXPECT_EQ(allowed_cpus(), before);
  }
  EXPECT_EQ(allowed_cpus(), before);
}

TEST(Kolorun, EachRankRunsOnItsShareOfTheCpus) {
  const std::vector<int> cpus = allowed_cpus();
  if (cpus.size() < 2) GTEST_SKIP() << "needs 2 CPUs to bind 2 ranks apart; this process has 1";
  const auto plan = plan_binding(cpus, 2, BindTo::kAuto).value();
  const std::string show = "grep '^Cpus_allowed_list' /proc/self/status";
  Proc bound({kKolorun, "-np", "2", "sh", "-c", show});
  ASSERT_EQ(exit_code(bound.finish()), 0) << bound.err();
  for (int r = 0; r < 2; ++r)
    EXPECT_NE(bound.out().find("[" + std::to_string(r) + "] Cpus_allowed_list:\t" +
                               format_cpu_list(plan[r]) + "\n"),
              std::string::npos)
        << bound.out();
  Proc free({kKolorun, "--bind-to", "none", "-np", "2", "sh", "-c", show});
  ASSERT_EQ(exit_code(free.finish()), 0) << free.err();
  for (int r = 0; r < 2; ++r)
    EXPECT_NE(free.out().find("[" + std::to_string(r) + "] Cpus_allowed_list:\t" +
                              format_cpu_list(cpus) + "\n"),
              std::string::npos)
        << free.out();
}

TEST(LinePrefixer, PrefixesWholeLinesAndHoldsPartialOnes) {
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  {
    OutputSink sink(p[1]);
    LinePrefixer lines("[7] ", sink);
    lines.feed("a\nb");
    lines.feed("c\n\nd");
    lines.finish();
    EXPECT_EQ(sink.flush(), 24u);
    EXPECT_FALSE(sink.wants_write());
  }
  ::close(p[1]);
  std::string got;
  char buf[256];
  ssize_t n;
  while ((n = ::read(p[0], buf, sizeof buf)) > 0) got.append(buf, static_cast<size_t>(n));
  ::close(p[0]);
  EXPECT_EQ(got, "[7] a\n[7] bc\n[7] \n[7] d\n");
}

// ---- end to end ----

TEST(Kolorun, SetsTheWorldEnvironmentForEachRank) {
  Proc p({kKolorun, "-np", "3", "-x", "EXTRA=hello", "--fusion-threshold", "1MiB", kChild, "env"});
  int status = p.finish();
  ASSERT_EQ(exit_code(status), 0) << p.err();
  auto env = parse_env_lines(p.out());
  ASSERT_EQ(env.size(), 3u) << p.out();
  std::set<std::string> secrets, addrs;
  for (int r = 0; r < 3; ++r) {
    auto& e = env[r];
    EXPECT_EQ(e["KOLO_RANK"], std::to_string(r));
    EXPECT_EQ(e["KOLO_SIZE"], "3");
    EXPECT_EQ(e["KOLO_LOCAL_RANK"], std::to_string(r));
    EXPECT_EQ(e["KOLO_LOCAL_SIZE"], "3");
    EXPECT_EQ(e["KOLO_CROSS_RANK"], "0");
    EXPECT_EQ(e["KOLO_CROSS_SIZE"], "1");
    EXPECT_EQ(e["EXTRA"], "hello");
    EXPECT_EQ(e["KOLO_FUSION_THRESHOLD"], "1MiB");
    // No --timeout: the ranks take the registry's default, as kolorun does.
    EXPECT_EQ(e["KOLO_RENDEZVOUS_TIMEOUT"], "<unset>");
    // Compute threads: as many as the rank's CPU share, unless the caller chose.
    const char* chosen = std::getenv("OPENBLAS_NUM_THREADS");
    const std::vector<int> cpus = allowed_cpus();
    const std::vector<int> mine = plan_binding(cpus, 3, BindTo::kAuto).value()[r];
    const size_t share = mine.empty() ? std::max<size_t>(1, cpus.size() / 3) : mine.size();
    EXPECT_EQ(e["OPENBLAS_NUM_THREADS"], chosen ? std::string(chosen) : std::to_string(share));
    EXPECT_TRUE(std::regex_match(e["KOLO_SECRET"], std::regex("[0-9a-f]{32}"))) << e["KOLO_SECRET"];
    EXPECT_TRUE(std::regex_match(e["KOLO_STORE_ADDR"], std::regex(R"(127\.0\.0\.1:\d+)")));
    secrets.insert(e["KOLO_SECRET"]);
    addrs.insert(e["KOLO_STORE_ADDR"]);
  }
  EXPECT_EQ(secrets.size(), 1u);
  EXPECT_EQ(addrs.size(), 1u);
  // Every stdout line carries a rank prefix.
  std::istringstream in(p.out());
  std::string l;
  int lines = 0;
  while (std::getline(in, l)) {
    ++lines;
    EXPECT_TRUE(std::regex_search(l, std::regex(R"(^\[[0-2]\] )"))) << l;
  }
  EXPECT_EQ(lines, 36);  // 12 variables x 3 ranks
}

TEST(Kolorun, RanksBuildTheirWorldAndMeetThroughTheStore) {
  Proc p({kKolorun, "-np", "3", kChild, "world"});
  ASSERT_EQ(exit_code(p.finish()), 0) << p.err();
  for (int r = 0; r < 3; ++r)
    EXPECT_NE(p.out().find("[" + std::to_string(r) + "] world ok rank=" + std::to_string(r) +
                           " size=3\n"),
              std::string::npos)
        << p.out();
}

TEST(Kolorun, StderrIsPrefixedAndNoTagOutputPassesThrough) {
  Proc tagged({kKolorun, "-np", "2", kChild, "bogus-mode"});
  EXPECT_EQ(exit_code(tagged.finish()), 64);
  EXPECT_NE(tagged.err().find("] kolorun_test_child: unknown mode 'bogus-mode'\n"),
            std::string::npos)
      << tagged.err();
  Proc plain({kKolorun, "--no-tag-output", "-np", "1", kChild, "env"});
  ASSERT_EQ(exit_code(plain.finish()), 0) << plain.err();
  EXPECT_EQ(plain.out().rfind("KOLO_RANK=0\n", 0), 0u) << plain.out();
}

TEST(Kolorun, AFailingRankStopsTheOthersAndIsNamed) {
  // Rank 1 exits 3 once the others sleep (forever, unless kolorun stops them).
  TempDir ready;
  std::string script = "if [ \"$KOLO_RANK\" = 1 ]; then " + wait_ready(ready.path, {0, 2}) +
                       "exit 3; fi; exec " + kChild + " sleep";
  Proc p({kKolorun, "-np", "3", "-x", "READY_DIR=" + ready.path, "sh", "-c", script});
  int status = p.finish(20s);
  EXPECT_EQ(exit_code(status), 3);
  EXPECT_TRUE(std::regex_search(
      p.err(), std::regex(R"(kolorun: rank 1 \(pid \d+\) exited with status 3\n)")))
      << p.err();
  // The sleeping ranks are gone, not orphaned.
  std::regex sleeping(R"(\[(0|2)\] sleeping pid=(\d+))");
  int seen = 0;
  for (std::sregex_iterator it(p.out().begin(), p.out().end(), sleeping), end; it != end; ++it) {
    ++seen;
    pid_t pid = std::stoi((*it)[2]);
    EXPECT_EQ(::kill(pid, 0), -1) << "rank " << (*it)[1] << " pid " << pid << " still exists";
    EXPECT_EQ(errno, ESRCH);
  }
  EXPECT_EQ(seen, 2) << p.out();
}

// Rank 1 exits 3, and kolorun is interrupted within the 250 ms that it holds such a failure
// (Note [Which rank kolorun names]): the interruption was reported first, so kolorun exits
// 128 + SIGINT and reports nothing more. It used to report the held failure too ("stopping the
// other ranks" a second time; on several nodes, on_failure twice) and exit with status 3.
TEST(Kolorun, AnInterruptionWhileAFailureIsHeldIsTheOnlyReport) {
  TempDir dir;
  const std::string pid_file = dir.path + "/pid1";
  // Rank 0 waits until rank 1 has been reaped (its pid is gone), then interrupts kolorun.
  std::string script = "if [ \"$KOLO_RANK\" = 1 ]; then echo $$ > " + pid_file + ".tmp; mv " +
                       pid_file + ".tmp " + pid_file + "; exit 3; fi; " + "while [ ! -e " +
                       pid_file + " ]; do sleep 0.01; done; " + "while kill -0 $(cat " + pid_file +
                       ") 2>/dev/null; do sleep 0.01; done; " + "kill -INT $PPID; exec " + kChild +
                       " sleep";
  Proc p({kKolorun, "-np", "2", "sh", "-c", script});
  EXPECT_EQ(exit_code(p.finish(20s)), 128 + SIGINT) << p.err();
  EXPECT_NE(p.err().find("kolorun: got SIGINT; forwarding it to 1 rank(s)"), std::string::npos)
      << p.err();
  EXPECT_EQ(p.err().find("exited with status 3"), std::string::npos) << p.err();
  EXPECT_EQ(p.err().find("stopping the other ranks"), std::string::npos) << p.err();
}

// Rank 0 interrupts kolorun once rank 1 is ready; rank 1 exits 3 when the SIGINT that kolorun
// forwards reaches it. The interruption was the job's first report, so kolorun exits
// 128 + SIGINT and reports nothing more (no "stopping the other ranks"; on several nodes, no
// second on_failure).
TEST(Kolorun, AFailureAfterAnInterruptionIsNotReported) {
  TempDir ready;
  std::string script = "if [ \"$KOLO_RANK\" = 1 ]; then trap 'exit 3' INT; touch " + ready.path +
                       "/1; while true; do sleep 0.01; done; fi; " + wait_ready(ready.path, {1}) +
                       "kill -INT $PPID; exec " + kChild + " sleep";
  Proc p({kKolorun, "-np", "2", "sh", "-c", script});
  EXPECT_EQ(exit_code(p.finish(20s)), 128 + SIGINT) << p.err();
  EXPECT_NE(p.err().find("kolorun: got SIGINT; forwarding it to 2 rank(s)"), std::string::npos)
      << p.err();
  EXPECT_EQ(p.err().find("exited with status 3"), std::string::npos) << p.err();
  EXPECT_EQ(p.err().find("stopping the other ranks"), std::string::npos) << p.err();
}

// Note [Which rank kolorun names], over the order of ends alone.
TEST(KolorunBlame, TheFirstScanWinsAndWithinOneASignalThenAnErrorThenZero) {
  const int sigabrt = SIGABRT, sigkill = SIGKILL;  // waitpid statuses of signal deaths
  const int error = W_EXITCODE(1, 0), zero = W_EXITCODE(0, 0);
  // An exit found by an earlier scan is first, whatever either was.
  EXPECT_TRUE(ended_first({1, error, 3}, {0, sigabrt, 4}));
  EXPECT_FALSE(ended_first({0, sigabrt, 4}, {1, error, 3}));
  EXPECT_TRUE(ended_first({2, zero, 1}, {0, sigkill, 2}));
  // Within one scan: a signal, then an error, then 0, then the lower rank.
  EXPECT_TRUE(ended_first({2, sigkill, 5}, {0, error, 5}));
  EXPECT_TRUE(ended_first({2, error, 5}, {0, zero, 5}));
  EXPECT_TRUE(ended_first({0, error, 5}, {1, W_EXITCODE(7, 0), 5}));
  EXPECT_FALSE(ended_first({1, error, 5}, {1, error, 5}));  // irreflexive
  EXPECT_EQ(exit_text(error), "exited with status 1");
  EXPECT_EQ(exit_text(sigkill), "was killed by signal 9 (SIGKILL)");
}

// Issue 33: rank 1 returns 1 from main right after kolo::init(), without kolo::shutdown(),
// while ranks 0 and 2 wait in an allreduce; they throw the error (uncaught: SIGABRT). kolorun
// used to name a survivor's SIGABRT (4 of 4 runs) and exit 134, and the survivors said rank 1
// "called shutdown()". Now the survivors fail only once kolorun has recorded rank 1's end (Note
// [Departures] in coordinator/departures.h), so rank 1 is named and its status returned, every
// run, and they say what happened to it.
TEST(Kolorun, ARankThatLeavesEarlyIsNamedAndTheSurvivorsSayItLeft) {
  const std::string said =
      "what():  Aborted: kolo was shut down: rank 1 exited with status 1 before finishing, "
      "without calling kolo::shutdown() (it returned from main or called exit); pending "
      "operations were cancelled\n";
  for (int run = 0; run < 3; ++run) {
    Proc p({kKolorun, "--grace", "20s", "-np", "3", kKoloChild, "leave", "1", "1"});
    EXPECT_EQ(exit_code(p.finish(60s)), 1) << "run " << run << "\n" << p.err();
    EXPECT_TRUE(std::regex_search(
        p.err(), std::regex(R"(kolorun: rank 1 \(pid \d+\) exited with status 1\n)")))
        << p.err();
    EXPECT_EQ(p.err().find("SIGABRT"), std::string::npos) << p.err();
    EXPECT_EQ(p.err().find("called shutdown()"), std::string::npos) << p.err();
    for (const char* survivor : {"[0]   ", "[2]   "})
      EXPECT_NE(p.err().find(survivor + said), std::string::npos) << survivor << "\n" << p.err();
  }
}

// Rank 1 exits 3; rank 0, which ignores SIGTERM, kills itself with SIGKILL once rank 1 has been
// reaped. The error came first, and is named: kolorun used to hold an error exit for 250 ms and
// name a signal death within that time instead.
TEST(Kolorun, AnErrorExitIsNamedBeforeASignalDeathThatFollowsIt) {
  TempDir dir;
  const std::string pid_file = dir.path + "/pid1";
  std::string script = "if [ \"$KOLO_RANK\" = 1 ]; then echo $$ > " + pid_file + ".tmp; mv " +
                       pid_file + ".tmp " + pid_file + "; exit 3; fi; trap '' TERM; " +
                       "while [ ! -e " + pid_file + " ]; do sleep 0.01; done; " +
                       "while kill -0 $(cat " + pid_file + ") 2>/dev/null; do sleep 0.01; done; " +
                       "kill -9 $$";
  Proc p({kKolorun, "-np", "2", "sh", "-c", script});
  EXPECT_EQ(exit_code(p.finish(20s)), 3) << p.err();
  EXPECT_TRUE(std::regex_search(
      p.err(), std::regex(R"(^kolorun: rank 1 \(pid \d+\) exited with status 3\n)")))
      << p.err();
  EXPECT_EQ(p.err().find("killed by signal"), std::string::npos) << p.err();
}

// Rank 0 exits 0 at once; rank 1 exits 5 once rank 0 has been reaped. Rank 0 left first, while
// rank 1 still ran: kolorun names it first, then the failure, and returns the failure's status.
TEST(Kolorun, ARankThatExitedZeroWhileOthersRanIsNamedBeforeTheFailure) {
  TempDir dir;
  const std::string pid_file = dir.path + "/pid0";
  std::string script = "if [ \"$KOLO_RANK\" = 0 ]; then echo $$ > " + pid_file + ".tmp; mv " +
                       pid_file + ".tmp " + pid_file + "; exit 0; fi; " + "while [ ! -e " +
                       pid_file + " ]; do sleep 0.01; done; " + "while kill -0 $(cat " + pid_file +
                       ") 2>/dev/null; do sleep 0.01; done; exit 5";
  Proc p({kKolorun, "-np", "2", "sh", "-c", script});
  EXPECT_EQ(exit_code(p.finish(20s)), 5) << p.err();
  EXPECT_TRUE(std::regex_search(
      p.err(), std::regex(R"(^kolorun: rank 0 \(pid \d+\) exited with status 0 while the other )"
                          R"(ranks still ran, the first rank to leave; then rank 1 \(pid \d+\) )"
                          R"(exited with status 5\n$)")))
      << p.err();
}

TEST(Kolorun, ARankKilledByASignalIsNamedWithTheSignal) {
  Proc p({kKolorun, "-np", "2", "sh", "-c",
          "if [ \"$KOLO_RANK\" = 0 ]; then kill -9 $$; fi; exec " + kChild + " sleep"});
  EXPECT_EQ(exit_code(p.finish(20s)), 128 + 9);
  EXPECT_TRUE(std::regex_search(
      p.err(), std::regex(R"(kolorun: rank 0 \(pid \d+\) was killed by signal 9 \(SIGKILL\))")))
      << p.err();
}

TEST(Kolorun, ARankIgnoringSigtermIsKilledAfterTheGrace) {
  TempDir ready;
  std::string script = "if [ \"$KOLO_RANK\" = 0 ]; then " + wait_ready(ready.path, {1}) +
                       "exit 5; fi; exec " + kChild + " ignore-term";
  Proc p({kKolorun, "--grace", "200ms", "-np", "2", "-x", "READY_DIR=" + ready.path, "sh", "-c",
          script});
  EXPECT_EQ(exit_code(p.finish(20s)), 5);
  EXPECT_NE(p.err().find("rank 1 (pid "), std::string::npos) << p.err();
  EXPECT_NE(p.err().find("did not stop within the grace period; sending SIGKILL"),
            std::string::npos)
      << p.err();
}

// Whether process `pid` has ended: gone, or a zombie that nobody has reaped yet.
using kolo::testing::has_ended;

// Note [Ranks die with kolorun]: SIGKILL of kolorun, which can forward nothing, still ends
// every rank (before, they ran on under init).
TEST(Kolorun, RanksDieWhenKolorunIsKilled) {
  Proc p({kKolorun, "-np", "2", kChild, "sleep"});
  ASSERT_TRUE(p.wait_for_stdout("sleeping pid=", 2, 20s)) << p.out() << p.err();
  std::vector<pid_t> ranks;
  for (size_t at = p.out().find("pid="); at != std::string::npos; at = p.out().find("pid=", at + 1))
    ranks.push_back(static_cast<pid_t>(std::atol(p.out().c_str() + at + 4)));
  ASSERT_EQ(ranks.size(), 2u) << p.out();
  for (pid_t pid : ranks) ASSERT_FALSE(has_ended(pid)) << pid;
  p.signal(SIGKILL);
  EXPECT_EQ(exit_code(p.finish(20s)), -SIGKILL);
  // The kernel delivers the signal as kolorun exits; 10 s only bounds a broken machine.
  const auto deadline = Clock::now() + 10s;
  for (pid_t pid : ranks) {
    while (!has_ended(pid) && Clock::now() < deadline) std::this_thread::sleep_for(20ms);
    EXPECT_TRUE(has_ended(pid)) << "rank pid " << pid << " outlived kolorun";
    if (!has_ended(pid)) ::kill(pid, SIGKILL);
  }
}

// A count the node cannot hold is refused before anything starts (it used to spawn hundreds of
// ranks before failing on "pipe: Too many open files").
TEST(Kolorun, ARankCountTheNodeCannotHoldIsRefusedBeforeStarting) {
  Proc p({kKolorun, "-np", "100000", kChild, "sleep"});
  EXPECT_EQ(exit_code(p.finish(20s)), 2);
  EXPECT_EQ(p.out(), "");
  EXPECT_EQ(p.err().rfind("kolorun: -np 100000 ", 0), 0u) << p.err();
  EXPECT_TRUE(check_node_capacity(2, true).ok());
  EXPECT_EQ(check_node_capacity(1 << 30, false).code(), StatusCode::kInvalidArgument);
}

TEST(Kolorun, SigtermIsForwardedToEveryRank) {
  Proc p({kKolorun, "-np", "2", kChild, "sleep-report"});
  ASSERT_TRUE(p.wait_for_stdout("] ready\n", 2, 20s)) << p.out() << p.err();
  p.signal(SIGTERM);
  EXPECT_EQ(exit_code(p.finish(20s)), 128 + SIGTERM);
  EXPECT_NE(p.out().find("[0] got SIGTERM\n"), std::string::npos) << p.out();
  EXPECT_NE(p.out().find("[1] got SIGTERM\n"), std::string::npos) << p.out();
  EXPECT_NE(p.err().find("kolorun: got SIGTERM; forwarding it to 2 rank(s)"), std::string::npos)
      << p.err();
}

// Starts args with the descriptors fa sets up (Proc reads both outputs; these tests must not).
pid_t spawn_with(std::vector<std::string> args, const posix_spawn_file_actions_t& fa) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  EXPECT_EQ(posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ), 0);
  return pid;
}

// The wait status of pid once it exits, or nullopt when it outlived `bound` (it is then killed;
// a kolorun's ranks die with it).
std::optional<int> exit_within(pid_t pid, std::chrono::milliseconds bound) {
  int status = 0;
  for (auto deadline = Clock::now() + bound; Clock::now() < deadline;) {
    if (::waitpid(pid, &status, WNOHANG) == pid) return status;
    std::this_thread::sleep_for(20ms);
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &status, 0);
  return std::nullopt;
}

// Note [kolorun output never blocks]: with its stdout a pipe that nobody reads, and ranks
// printing without end, kolorun still obeys SIGINT: it exits 128 + SIGINT within seconds and no
// rank is left. It used to sit in write(2) on the full pipe until the reader went away.
TEST(Kolorun, SigintIsObeyedWhileNobodyReadsTheOutput) {
  TempDir dir;
  const std::string err_path = dir.path + "/stderr";
  int out[2];
  ASSERT_EQ(::pipe2(out, O_CLOEXEC), 0);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_addopen(&fa, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  const pid_t pid = spawn_with(
      {kKolorun, "--grace", "1s", "-np", "2", "-x", "READY_DIR=" + dir.path, kChild, "flood"}, fa);
  posix_spawn_file_actions_destroy(&fa);
  ::close(out[1]);
  auto read_err = [&] {
    std::ifstream in(err_path);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  auto ranks = [&] {
    std::vector<pid_t> pids;
    for (const char* rank : {"/0", "/1"}) {
      std::ifstream in(dir.path + rank);
      pid_t pid = 0;
      if (in >> pid) pids.push_back(pid);
    }
    return pids;
  };
  // Both ranks flood, and the pipe is full: what it holds stops growing (its page slots are
  // all taken; they need not hold a full page each, so the count stays under F_GETPIPE_SZ).
  int unread = 0, before = -1;
  for (auto deadline = Clock::now() + 20s;
       Clock::now() < deadline && (ranks().size() < 2 || unread == 0 || unread != before);) {
    before = unread;
    std::this_thread::sleep_for(200ms);
    ASSERT_EQ(::ioctl(out[0], FIONREAD, &unread), 0);
  }
  ASSERT_EQ(ranks().size(), 2u) << read_err();
  ASSERT_GT(unread, ::fcntl(out[0], F_GETPIPE_SZ) / 2);
  ASSERT_EQ(unread, before);

  ::kill(pid, SIGINT);
  // The bound is generous for a loaded machine: --grace is 1 s, draining and flushing take at
  // most 3 s more. Before the fix kolorun never exited while the pipe stayed unread.
  const std::optional<int> status = exit_within(pid, 15s);
  ::close(out[0]);
  ASSERT_TRUE(status) << "kolorun outlived SIGINT by 15 s while its stdout was not read\n"
                      << read_err();
  EXPECT_EQ(exit_code(*status), 128 + SIGINT) << read_err();
  EXPECT_NE(read_err().find("kolorun: got SIGINT; forwarding it to 2 rank(s)"), std::string::npos)
      << read_err();
  EXPECT_TRUE(std::regex_search(
      read_err(), std::regex(R"(\nkolorun: dropped the last \d+ bytes of output to stdout: nobody )"
                             R"(read them within 2 s of the interruption\n$)")))
      << read_err();
  for (pid_t rank : ranks()) EXPECT_TRUE(has_ended(rank)) << "rank pid " << rank << " is left";
}

// kolorun started with stdout and stderr closed runs its job to the end: its output is dropped,
// never waited for (a closed descriptor never reports that it takes more).
TEST(Kolorun, ClosedStdoutAndStderrAreNotWaitedFor) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addclose(&fa, 1);
  posix_spawn_file_actions_addclose(&fa, 2);
  const pid_t pid = spawn_with({kKolorun, "-np", "2", kChild, "env"}, fa);
  posix_spawn_file_actions_destroy(&fa);
  const std::optional<int> status = exit_within(pid, 20s);
  ASSERT_TRUE(status) << "kolorun with closed stdout and stderr did not end a 2-rank env job";
  EXPECT_EQ(exit_code(*status), 0);
}

// Sets environment variables for the kolorun processes a test starts; restores them after.
class ScopedEnv {
 public:
  ScopedEnv(std::initializer_list<std::pair<std::string, std::string>> vars) {
    for (const auto& [k, v] : vars) {
      const char* old = std::getenv(k.c_str());
      saved_[k] = old ? std::optional<std::string>(old) : std::nullopt;
      ::setenv(k.c_str(), v.c_str(), 1);
    }
  }
  ~ScopedEnv() {
    for (const auto& [k, v] : saved_)
      v ? ::setenv(k.c_str(), v->c_str(), 1) : ::unsetenv(k.c_str());
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

// A bad knob, from kolorun's environment, -x or a flag: exit 2 naming it, and no rank starts.
TEST(Kolorun, ABadKnobValueStartsNothing) {
  TempDir dir;
  const std::string marker = dir.path + "/started";
  const std::vector<std::string> job = {"sh", "-c", "touch " + marker};
  auto run = [&](std::vector<std::string> flags) {
    std::vector<std::string> args = {kKolorun, "-np", "2"};
    args.insert(args.end(), flags.begin(), flags.end());
    args.insert(args.end(), job.begin(), job.end());
    Proc p(args);
    EXPECT_EQ(exit_code(p.finish()), 2) << p.err();
    EXPECT_FALSE(std::filesystem::exists(marker)) << "a rank started";
    return p.err();
  };
  {
    ScopedEnv env({{"KOLO_STALL_CHECK_TIME", "forever"}});
    EXPECT_EQ(run({}),
              "kolorun: KOLO_STALL_CHECK_TIME=forever is invalid: expected a duration with an "
              "optional unit (ns, us, ms, s, min, h; none: seconds), e.g. 5ms\n");
  }
  {
    ScopedEnv env({{"KOLO_TCP_SEGMENT", "1MiB"}});
    EXPECT_EQ(run({}),
              "kolorun: KOLO_TCP_SEGMENT was renamed KOLO_RING_SEGMENT: set "
              "KOLO_RING_SEGMENT=1MiB instead\n");
  }
  EXPECT_EQ(run({"-x", "KOLO_CACHE_CAPACITY=-5"}),
            "kolorun: KOLO_CACHE_CAPACITY=-5 is invalid: expected an integer in [0, 16777216]\n");
  EXPECT_EQ(run({"--op-timeout", "0"})
                .rfind("kolorun: --op-timeout 0 is invalid: expected a "
                       "duration",
                       0),
            0u);
}

// --print-config's text without its KOLO_CPU_OPERATIONS and KOLO_GPU_OPERATIONS lines.
std::string without_backend_lines(const std::string& text) {
  std::istringstream in(text);
  std::string out;
  for (std::string line; std::getline(in, line);)
    if (line.rfind("KOLO_CPU_OPERATIONS ", 0) != 0 && line.rfind("KOLO_GPU_OPERATIONS ", 0) != 0)
      out += line + "\n";
  return out;
}

// The line of `knob` in `text`, without its newline; empty when there is none.
std::string line_of(const std::string& text, const std::string& knob) {
  size_t at = text.find("\n" + knob + " ");
  if (at == std::string::npos) return "";
  return text.substr(at + 1, text.find('\n', at + 1) - at - 1);
}

TEST(Kolorun, PrintConfigShowsEachValueAndItsSourceAndStartsNothing) {
  ScopedEnv env({{"KOLO_FUSION_THRESHOLD", "8MiB"}, {"KOLO_CYCLETIME", "1ms"}});
  Proc p({kKolorun, "--print-config", "--cycle-time", "3ms"});
  ASSERT_EQ(exit_code(p.finish()), 0) << p.err();
  Result<KnobSet> expected =
      KnobSet::read({{"KOLO_FUSION_THRESHOLD", "8MiB"}}, {{"KOLO_CYCLE_TIME", "3ms"}});
  ASSERT_TRUE(expected.ok());
  // describe()'s lines, but the backends' (PrintConfigShowsTheBackendThisJobWillUseAndWhy).
  EXPECT_EQ(without_backend_lines(p.out()), without_backend_lines(expected->describe()));
  EXPECT_NE(p.out().find("KOLO_CPU_OPERATIONS       (per job)     default: shm when every rank is "
                         "on one host, else tcp (mpi under mpirun); kolorun --print-config -np N "
                         "shows this job's\n"),
            std::string::npos)
      << p.out();
  EXPECT_NE(p.out().find("KOLO_FUSION_THRESHOLD     8MiB          environment\n"),
            std::string::npos)
      << p.out();
  EXPECT_NE(p.out().find("KOLO_CYCLE_TIME           3ms           flag --cycle-time\n"),
            std::string::npos)
      << p.out();
  EXPECT_EQ(p.err(),
            "kolorun: warning: KOLO_CYCLETIME is not a Kolo variable and is ignored; did you mean "
            "KOLO_CYCLE_TIME?\n");

  Proc md({kKolorun, "--print-config=markdown"});
  ASSERT_EQ(exit_code(md.finish()), 0) << md.err();
  EXPECT_EQ(md.out(), knobs_markdown());
}

// Issue 33 item 4: one answer to "which backend will run". With the job's shape, --print-config
// shows the backend init() will choose on this host (backends/registry.h) and why; a set knob
// shows where it was set.
TEST(Kolorun, PrintConfigShowsTheBackendThisJobWillUseAndWhy) {
  auto print = [](std::vector<std::string> flags) {
    std::vector<std::string> args = {kKolorun, "--print-config"};
    args.insert(args.end(), flags.begin(), flags.end());
    Proc p(args);
    EXPECT_EQ(exit_code(p.finish()), 0) << p.err();
    return p.out();
  };
  const std::string one_host = print({"-np", "2"});
  EXPECT_EQ(line_of(one_host, "KOLO_CPU_OPERATIONS"),
            "KOLO_CPU_OPERATIONS       shm           default for this job: its 2 ranks share one "
            "host");
  // CUDA tensors: nccl when each rank has a GPU of its own, else staged to the CPU backend.
  const std::string gpu = line_of(one_host, "KOLO_GPU_OPERATIONS");
  EXPECT_TRUE(std::regex_match(
      gpu,
      std::regex(R"(KOLO_GPU_OPERATIONS       (nccl          default for this job: \d+ GPU\(s\) )"
                 R"(visible here for 2 rank\(s\) on this host.*|\(none\)        default.*; )"
                 R"(CUDA tensors go through host memory to shm))")))
      << gpu;
  const std::string two_hosts =
      "KOLO_CPU_OPERATIONS       tcp           default for this job: its ranks are on 2 hosts, 2 "
      "on each";
  EXPECT_EQ(line_of(print({"-np", "2", "--nnodes", "2"}), "KOLO_CPU_OPERATIONS"), two_hosts);
  EXPECT_EQ(line_of(print({"--np-total", "4", "--nnodes", "2"}), "KOLO_CPU_OPERATIONS"), two_hosts);
  EXPECT_EQ(line_of(print({"-np", "2", "--cpu-operations", "tcp"}), "KOLO_CPU_OPERATIONS"),
            "KOLO_CPU_OPERATIONS       tcp           flag --cpu-operations");
  {
    ScopedEnv env({{"KOLO_CPU_OPERATIONS", "tcp"}});
    const std::string set = print({"-np", "2"});
    EXPECT_EQ(line_of(set, "KOLO_CPU_OPERATIONS"),
              "KOLO_CPU_OPERATIONS       tcp           environment");
    EXPECT_TRUE(line_of(set, "KOLO_GPU_OPERATIONS").ends_with("to tcp") ||
                line_of(set, "KOLO_GPU_OPERATIONS").find(" nccl ") != std::string::npos)
        << set;
  }
  EXPECT_EQ(line_of(print({"-np", "2", "-x", "KOLO_GPU_OPERATIONS=tcp"}), "KOLO_GPU_OPERATIONS"),
            "KOLO_GPU_OPERATIONS       tcp           environment");
}

TEST(Kolorun, AMissingCommandIsReported) {
  Proc p({kKolorun, "-np", "2", "/nonexistent/kolo-program"});
  EXPECT_EQ(exit_code(p.finish()), 1);
  EXPECT_NE(
      p.err().find("cannot start rank 0: /nonexistent/kolo-program: No such file or directory"),
      std::string::npos)
      << p.err();
}

TEST(Kolorun, TwoNodesOnLocalhostFormOneWorld) {
  SecretFile secret("0123456789abcdef");
  std::string rdzv = "127.0.0.1:" + std::to_string(free_port());
  auto node = [&](int k, const char* mode) {
    return node_args(k, rdzv, secret.path, 2, {"--timeout", "20s", kChild, mode});
  };
  // Node 1 first: it must wait for node 0's store to appear.
  Proc n1(node(1, "env"));
  std::this_thread::sleep_for(100ms);
  Proc n0(node(0, "env"));
  ASSERT_EQ(exit_code(n1.finish()), 0) << n1.err();
  ASSERT_EQ(exit_code(n0.finish()), 0) << n0.err();
  auto e0 = parse_env_lines(n0.out());
  auto e1 = parse_env_lines(n1.out());
  ASSERT_EQ(e0.size(), 2u) << n0.out();
  ASSERT_EQ(e1.size(), 2u) << n1.out();
  for (int r = 0; r < 4; ++r) {
    auto& e = r < 2 ? e0[r] : e1[r];
    EXPECT_EQ(e["KOLO_RANK"], std::to_string(r));
    EXPECT_EQ(e["KOLO_SIZE"], "4");
    EXPECT_EQ(e["KOLO_LOCAL_RANK"], std::to_string(r % 2));
    EXPECT_EQ(e["KOLO_LOCAL_SIZE"], "2");
    EXPECT_EQ(e["KOLO_CROSS_RANK"], std::to_string(r / 2));
    EXPECT_EQ(e["KOLO_CROSS_SIZE"], "2");
    EXPECT_EQ(e["KOLO_STORE_ADDR"], rdzv);
    EXPECT_EQ(e["KOLO_SECRET"], "0123456789abcdef");
    EXPECT_EQ(e["KOLO_RENDEZVOUS_TIMEOUT"], "20s");  // --timeout bounds the ranks' waits too
  }
}

// --np-total 4 on each of two nodes: two ranks each, four in all.
TEST(Kolorun, NpTotalSplitsTheJobOverItsNodes) {
  SecretFile secret("0123456789abcdef");
  std::string rdzv = "127.0.0.1:" + std::to_string(free_port());
  auto node = [&](int k) {
    return std::vector<std::string>{kKolorun,
                                    "--nnodes",
                                    "2",
                                    "--node-rank",
                                    std::to_string(k),
                                    "--rdzv",
                                    rdzv,
                                    "--secret-file",
                                    secret.path,
                                    "--np-total",
                                    "4",
                                    "--timeout",
                                    "20s",
                                    kChild,
                                    "env"};
  };
  Proc n0(node(0)), n1(node(1));
  ASSERT_EQ(exit_code(n1.finish()), 0) << n1.err();
  ASSERT_EQ(exit_code(n0.finish()), 0) << n0.err();
  auto e0 = parse_env_lines(n0.out()), e1 = parse_env_lines(n1.out());
  ASSERT_EQ(e0.size(), 2u) << n0.out();
  ASSERT_EQ(e1.size(), 2u) << n1.out();
  for (int r = 0; r < 4; ++r) {
    auto& e = r < 2 ? e0[r] : e1[r];
    EXPECT_EQ(e["KOLO_SIZE"], "4");
    EXPECT_EQ(e["KOLO_LOCAL_SIZE"], "2");
  }
  Proc one({kKolorun, "--np-total", "3", kChild, "env"});
  ASSERT_EQ(exit_code(one.finish()), 0) << one.err();
  EXPECT_EQ(parse_env_lines(one.out()).size(), 3u) << one.out();
}

TEST(Kolorun, TwoNodesRanksMeetThroughNodeZerosStore) {
  SecretFile secret("s3cret");
  std::string rdzv = "127.0.0.1:" + std::to_string(free_port());
  auto node = [&](int k) { return node_args(k, rdzv, secret.path, 2, {kChild, "world"}); };
  Proc n0(node(0));
  Proc n1(node(1));
  ASSERT_EQ(exit_code(n0.finish()), 0) << n0.err();
  ASSERT_EQ(exit_code(n1.finish()), 0) << n1.err();
  EXPECT_NE(n0.out().find("[1] world ok rank=1 size=4"), std::string::npos) << n0.out();
  EXPECT_NE(n1.out().find("[3] world ok rank=3 size=4"), std::string::npos) << n1.out();
}

TEST(Kolorun, AFailureOnOneNodeStopsTheRanksOfTheOther) {
  SecretFile secret("s");
  std::string rdzv = "127.0.0.1:" + std::to_string(free_port());
  std::string script = "if [ \"$KOLO_RANK\" = 3 ]; then exit 7; fi; exec " + kChild + " sleep";
  auto node = [&](int k) { return node_args(k, rdzv, secret.path, 2, {"sh", "-c", script}); };
  Proc n0(node(0));
  Proc n1(node(1));
  EXPECT_EQ(exit_code(n1.finish(20s)), 7);
  EXPECT_EQ(exit_code(n0.finish(20s)), 1);
  EXPECT_TRUE(std::regex_search(n1.err(),
                                std::regex(R"(kolorun: rank 3 \(pid \d+\) exited with status 7)")))
      << n1.err();
  EXPECT_TRUE(std::regex_search(
      n0.err(), std::regex(R"(kolorun: node 1: rank 3 \(pid \d+\) exited with status 7\n)")))
      << n0.err();
}

// A rank that cannot start on node 1 (its command is missing there) stops node 0's ranks too,
// as any other failure does: node 1's kolorun used to return at once without telling the
// others, so node 0's ranks ran on (here: sleep forever; a real job's waited in init()).
TEST(Kolorun, ARankThatCannotStartOnOneNodeStopsTheOtherNode) {
  SecretFile secret("s");
  std::string rdzv = "127.0.0.1:" + std::to_string(free_port());
  Proc n0(node_args(0, rdzv, secret.path, 2, {kChild, "sleep"}));
  Proc n1(node_args(1, rdzv, secret.path, 2, {"/nonexistent/kolo-program"}));
  EXPECT_EQ(exit_code(n1.finish(20s)), 1) << n1.err();
  EXPECT_EQ(exit_code(n0.finish(20s)), 1) << n0.err();
  const std::string cause = "cannot start rank 2: /nonexistent/kolo-program: No such file";
  EXPECT_NE(n1.err().find("kolorun: " + cause), std::string::npos) << n1.err();
  EXPECT_NE(n0.err().find("kolorun: node 1: " + cause), std::string::npos) << n0.err();
  EXPECT_NE(n0.err().find("stopping this node's ranks"), std::string::npos) << n0.err();
}

// kolorun for node k of a two-node job of one rank per node, waiting up to 60 s for the other.
std::vector<std::string> one_rank_node(const std::string& rdzv, int k,
                                       std::vector<std::string> command) {
  std::vector<std::string> args{kKolorun, "--nnodes", "2",        "--node-rank", std::to_string(k),
                                "--rdzv", rdzv,       "--secret", "s",           "--timeout",
                                "60s",    "-np",      "1"};
  args.insert(args.end(), command.begin(), command.end());
  return args;
}

// Node 0's kolorun (and with it the store) is gone when a rank of node 1 fails: node 1's
// kolorun reports the failure and exits within seconds, not after --timeout (it used to retry
// the lost store for the whole --timeout, once to publish the failure and once to say "done").
TEST(Kolorun, ANodeOutlivingNodeZeroExitsWithinSeconds) {
  std::string rdzv = "127.0.0.1:" + std::to_string(free_port());
  auto node = [&](int k, std::vector<std::string> command) {
    return one_rank_node(rdzv, k, std::move(command));
  };
  Proc n0(node(0, {kChild, "sleep"}));
  Proc n1(node(1, {"sh", "-c", "sleep 2; exit 5"}));
  ASSERT_TRUE(n0.wait_for_stdout("sleeping pid=", 1, 20s)) << n0.out() << n0.err();
  n0.signal(SIGKILL);
  EXPECT_EQ(exit_code(n0.finish(20s)), -SIGKILL);
  const auto start = Clock::now();
  EXPECT_EQ(exit_code(n1.finish(30s)), 5) << n1.err();
  EXPECT_LT(Clock::now() - start, 8s) << n1.err();
  EXPECT_TRUE(std::regex_search(n1.err(),
                                std::regex(R"(kolorun: rank 1 \(pid \d+\) exited with status 5)")))
      << n1.err();
}

// Node 0's ranks are done and it waits (up to --timeout) for node 1 to finish: SIGINT still
// ends it at once (it used to be ignored once the ranks had exited).
TEST(Kolorun, NodeZeroWaitingForTheOthersObeysSigint) {
  std::string rdzv = "127.0.0.1:" + std::to_string(free_port());
  auto node = [&](int k, std::vector<std::string> command) {
    return one_rank_node(rdzv, k, std::move(command));
  };
  Proc n0(node(0, {"sh", "-c", "echo finished"}));
  Proc n1(node(1, {kChild, "sleep"}));
  ASSERT_TRUE(n0.wait_for_stdout("finished", 1, 20s)) << n0.out() << n0.err();
  std::this_thread::sleep_for(300ms);  // into finish_job's wait for node 1
  n0.signal(SIGINT);
  const auto start = Clock::now();
  EXPECT_EQ(exit_code(n0.finish(30s)), -SIGINT) << n0.err();
  EXPECT_LT(Clock::now() - start, 5s);
  n1.signal(SIGTERM);
  n1.finish(20s);
}

// Issue 16: an outsider on the host writes kolorun/abort into a healthy two-node job's store.
// Without the secret it cannot: the forged key is refused and the job finishes normally.
TEST(Kolorun, AForgedAbortFromAnOutsiderIsIgnored) {
  const int port = free_port();
  const std::string rdzv = "127.0.0.1:" + std::to_string(port);
  auto node = [&](int k) {
    return std::vector<std::string>{kKolorun, "--nnodes", "2",   "--node-rank", std::to_string(k),
                                    "--rdzv", rdzv,       "-np", "1",           "sh",
                                    "-c",     "sleep 1.5"};
  };
  ::setenv("KOLO_SECRET", "the-real-secret", 1);
  Proc n0(node(0));
  Proc n1(node(1));
  ::unsetenv("KOLO_SECRET");
  // The outsider guesses a secret: the store does not prove it back, so the client gives up.
  auto guess = TcpStore::connect({"127.0.0.1", port}, "a-guess", 10s, 10s);
  ASSERT_FALSE(guess.ok());
  EXPECT_EQ(guess.status().code(), StatusCode::kPeerFailure) << guess.status().to_string();
  // Or it skips the handshake and sends the request as the old protocol had it.
  asio_raw_send(port, tcp_store::encode_request(
                          {tcp_store::Op::kSet, {"kolorun/abort"}, "node 1: forged", 0, 0}));
  EXPECT_EQ(exit_code(n0.finish(20s)), 0) << n0.err();
  EXPECT_EQ(exit_code(n1.finish(20s)), 0) << n1.err();
  EXPECT_EQ(n0.err(), "");
  EXPECT_EQ(n1.err(), "");
}

// Issue 27: node 0's kolorun dies after the nodes met but before node 1's rank has connected to
// its store. The rank gives up after the --timeout the user gave kolorun (3 s), not after a
// constant 30 s, and its error names the bound and the setting that changes it.
TEST(Kolorun, ARankWaitsForALostStoreAsLongAsTimeoutSays) {
  SecretFile secret("s");
  const std::string rdzv = "127.0.0.1:" + std::to_string(free_port());
  const std::string go = secret.dir.path + "/go";
  Proc n0(node_args(0, rdzv, secret.path, 1, {"--timeout", "3s", kChild, "sleep"}));
  // Node 1's rank starts init(), and so its store connect, only once node 0 is gone.
  Proc n1(node_args(1, rdzv, secret.path, 1,
                    {"--timeout", "3s", "sh", "-c",
                     "echo started; while [ ! -e " + go + " ]; do sleep 0.02; done; exec " +
                         kKoloChild + " leave 0 0"}));
  ASSERT_TRUE(n0.wait_for_stdout("sleeping pid=", 1, 20s)) << n0.out() << n0.err();
  ASSERT_TRUE(n1.wait_for_stdout("started", 1, 20s)) << n1.out() << n1.err();
  n0.signal(SIGKILL);
  EXPECT_EQ(exit_code(n0.finish(20s)), -SIGKILL);
  std::ofstream(go) << "";
  const auto start = Clock::now();
  EXPECT_EQ(exit_code(n1.finish(20s)), 65) << n1.err();  // kolorun_kolo_child's "init failed"
  const auto waited = Clock::now() - start;
  EXPECT_GT(waited, 2s) << n1.err();
  EXPECT_LT(waited, 3s + 5s) << n1.err();
  EXPECT_NE(n1.err().find("store: cannot connect to " + rdzv + " within 3s: "), std::string::npos)
      << n1.err();
  EXPECT_NE(n1.err().find("; KOLO_RENDEZVOUS_TIMEOUT=3s bounds each wait of the rendezvous "
                          "(kolorun --timeout DUR sets it)"),
            std::string::npos)
      << n1.err();
}

// The ranks' own waits follow --timeout too: rank 1 never calls init(), so rank 0's comparison
// of the job-wide knobs (the first wait after its store connect) gives up after 1 s, not 30 s,
// naming the setting.
TEST(Kolorun, ARanksInitWaitsForItsPeersAsLongAsTimeoutSays) {
  const auto start = Clock::now();
  Proc p({kKolorun, "--timeout", "1s", "-np", "2", "sh", "-c",
          "if [ \"$KOLO_RANK\" = 0 ]; then exec " + kKoloChild + " leave 9 0; fi; exec sleep 60"});
  EXPECT_EQ(exit_code(p.finish(20s)), 65) << p.err();  // kolorun_kolo_child's "init failed"
  const auto waited = Clock::now() - start;
  EXPECT_GT(waited, 900ms) << p.err();
  EXPECT_LT(waited, 1s + 5s) << p.err();
  EXPECT_NE(p.err().find("[0] init: Timeout: "), std::string::npos) << p.err();
  EXPECT_NE(p.err().find("; KOLO_RENDEZVOUS_TIMEOUT=1s bounds each wait of the rendezvous "
                         "(kolorun --timeout DUR sets it)"),
            std::string::npos)
      << p.err();
}

TEST(Kolorun, AMissingNodeTimesOutNamingIt) {
  std::string rdzv = "127.0.0.1:" + std::to_string(free_port());
  SecretFile secret("s");
  Proc p({kKolorun, "--nnodes", "3", "--node-rank", "0", "--rdzv", rdzv, "--secret-file",
          secret.path, "--timeout", "300ms", "-np", "1", kChild, "env"});
  EXPECT_EQ(exit_code(p.finish()), 1);
  EXPECT_EQ(p.err(),
            "kolorun: rendezvous timed out after 300ms: node ranks 1, 2 of 3 never arrived; "
            "KOLO_RENDEZVOUS_TIMEOUT=300ms bounds each wait of the rendezvous (kolorun --timeout "
            "DUR sets it)\n");
  EXPECT_EQ(p.out(), "");
}

// Issue 16: the secret stays off the command line, and out of files others can read.
TEST(Kolorun, TheSecretComesFromAPrivateFileAndTheCommandLineOneIsWarnedAbout) {
  SecretFile secret("from-the-file");
  Proc from_file({kKolorun, "--secret-file", secret.path, "-np", "1", kChild, "env"});
  ASSERT_EQ(exit_code(from_file.finish()), 0) << from_file.err();
  EXPECT_EQ(from_file.err(), "");
  EXPECT_EQ(parse_env_lines(from_file.out()).at(0)["KOLO_SECRET"], "from-the-file");

  SecretFile shared("from-the-file", 0640);
  Proc refused({kKolorun, "--secret-file", shared.path, "-np", "1", kChild, "env"});
  EXPECT_EQ(exit_code(refused.finish()), 1);
  EXPECT_EQ(refused.err(), "kolorun: --secret-file " + shared.path +
                               " has mode 0640: other users may read it; make it private with "
                               "chmod 600 " +
                               shared.path + "\n");
  EXPECT_EQ(refused.out(), "");

  Proc on_command_line({kKolorun, "--secret", "visible", "-np", "1", kChild, "env"});
  ASSERT_EQ(exit_code(on_command_line.finish()), 0) << on_command_line.err();
  EXPECT_EQ(on_command_line.err(),
            "kolorun: warning: --secret puts the job secret in the process list, where every "
            "user of this host can read it; use --secret-file PATH or KOLO_SECRET\n");
  EXPECT_EQ(parse_env_lines(on_command_line.out()).at(0)["KOLO_SECRET"], "visible");
}

TEST(Kolorun, MultiNodeWithoutASecretIsRefused) {
  Proc p({kKolorun, "--nnodes", "2", "--rdzv", "127.0.0.1:1", "-np", "1", kChild, "env"});
  EXPECT_EQ(exit_code(p.finish()), 1);
  EXPECT_NE(p.err().find("--nnodes 2 needs a secret shared by every node"), std::string::npos)
      << p.err();
}

}  // namespace
}  // namespace kolo::kolorun
