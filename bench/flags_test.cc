#include "bench/flags.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_options.h"
#include "bench/json_rows.h"
#include "common/build_info.h"

namespace kolo::bench {
namespace {

// The backends of this build, as the --backend flag lists them ("mpi, tcp").
std::string backend_names() {
  std::string out;
  for (std::string_view b : kolo::built_backends())
    out += (out.empty() ? "" : ", ") + std::string(b);
  return out;
}

// Owns the words of a command line as parse_flags() sees them (after the subcommand's name).
class Args {
 public:
  Args(std::initializer_list<std::string> words) : words_(words) {
    for (std::string& w : words_) pointers_.push_back(w.data());
  }
  Args(const Args&) = delete;  // pointers_ point into words_
  Args& operator=(const Args&) = delete;
  std::span<char* const> span() const { return pointers_; }

 private:
  std::vector<std::string> words_;
  std::vector<char*> pointers_;
};

struct Options {
  int iters = 10;
  uint64_t bytes = 4096;
  bool check = false;
  std::string name = "tcp";
  std::string path;
};

std::vector<Flag> flags_of(Options& o) {
  return {int_flag("--iters", "N", &o.iters, 1, kIntMax, "timed calls"),
          int_flag("--percent", "P", &o.iters, 0, 100, "a bounded number"),
          size_flag("-b", &o.bytes, 1, "message size"),
          switch_flag("--check", &o.check, "verify"),
          choice_flag(
              "--backend", "NAME", {"tcp", "mpi"},
              [&o](std::string_view v) {
                if (v != "tcp" && v != "mpi") return false;
                o.name = std::string(v);
                return true;
              },
              o.name, "backend"),
          text_flag("--out", "FILE", &o.path, "output file")};
}

// The InvalidArgument message of parsing `args`, or "" when it parsed.
std::string error_of(const Args& args) {
  Options o;
  const std::vector<Flag> flags = flags_of(o);
  Result<Parsed> r = parse_flags(flags, args.span());
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  return r.status().message();
}

TEST(Flags, StoresEveryKindOfValue) {
  Options o;
  const std::vector<Flag> flags = flags_of(o);
  Args args{"--iters", "7", "-b", "64KiB", "--check", "--backend", "mpi", "--out", "x.json"};
  Result<Parsed> r = parse_flags(flags, args.span());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(*r, Parsed::kRun);
  EXPECT_EQ(o.iters, 7);
  EXPECT_EQ(o.bytes, 65536u);
  EXPECT_TRUE(o.check);
  EXPECT_EQ(o.name, "mpi");
  EXPECT_EQ(o.path, "x.json");
}

TEST(Flags, NoWordsKeepsTheDefaults) {
  Options o;
  const std::vector<Flag> flags = flags_of(o);
  Result<Parsed> r = parse_flags(flags, Args{}.span());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(o.iters, 10);
  EXPECT_EQ(o.bytes, 4096u);
  EXPECT_FALSE(o.check);
  EXPECT_EQ(o.name, "tcp");
}

TEST(Flags, IntegersOutsideTheirRangeOrMalformedNameTheFlagValueAndForm) {
  EXPECT_EQ(error_of({"--iters", "0"}), "--iters '0' is invalid: expected an integer >= 1");
  EXPECT_EQ(error_of({"--iters", "-3"}), "--iters '-3' is invalid: expected an integer >= 1");
  EXPECT_EQ(error_of({"--iters", "abc"}), "--iters 'abc' is invalid: expected an integer >= 1");
  EXPECT_EQ(error_of({"--iters", "12x"}), "--iters '12x' is invalid: expected an integer >= 1");
  EXPECT_EQ(error_of({"--iters", "1.5"}), "--iters '1.5' is invalid: expected an integer >= 1");
  EXPECT_EQ(error_of({"--iters", ""}), "--iters '' is invalid: expected an integer >= 1");
  EXPECT_EQ(error_of({"--iters", "2147483648"}),
            "--iters '2147483648' is invalid: expected an integer >= 1");
  EXPECT_EQ(error_of({"--iters", "99999999999999999999"}),
            "--iters '99999999999999999999' is invalid: expected an integer >= 1");
  EXPECT_EQ(error_of({"--percent", "101"}),
            "--percent '101' is invalid: expected an integer in [0, 100]");
  EXPECT_EQ(error_of({"--percent", "100"}), "");
  EXPECT_EQ(error_of({"--iters", "2147483647"}), "");
}

TEST(Flags, SizesUseParseSizeAndTheirMinimum) {
  EXPECT_EQ(error_of({"-b", "4QB"}),
            "-b: invalid size '4QB' (unknown unit 'qb'); expected a non-negative number with an "
            "optional unit B, KB, KiB, MB, MiB, GB, GiB, TB, TiB, e.g. 64MiB");
  EXPECT_EQ(error_of({"-b", "-1"}),
            "-b: invalid size '-1' (negative); expected a non-negative number with an optional "
            "unit B, KB, KiB, MB, MiB, GB, GiB, TB, TiB, e.g. 64MiB");
  EXPECT_EQ(error_of({"-b", "0"}),
            "-b '0' is invalid: expected a size such as 4096, 64KiB or 1.5MB, at least 1 B");
  EXPECT_EQ(error_of({"-b", "1"}), "");
}

TEST(Flags, ChoicesListTheAcceptedNames) {
  EXPECT_EQ(error_of({"--backend", "shm"}), "--backend 'shm' is invalid: expected one of tcp, mpi");
}

TEST(Flags, UnknownFlagsStrayWordsRepeatsAndMissingValuesAreErrors) {
  EXPECT_EQ(error_of({"--frobnicate"}), "unknown option '--frobnicate' (see --help)");
  EXPECT_EQ(error_of({"-x", "1"}), "unknown option '-x' (see --help)");
  EXPECT_EQ(error_of({"7"}),
            "unexpected argument '7': every value follows its option (see --help)");
  EXPECT_EQ(error_of({"--iters", "2", "--iters", "3"}), "--iters is given twice");
  EXPECT_EQ(error_of({"--iters"}), "--iters needs a value: an integer >= 1");
  EXPECT_EQ(error_of({"--check", "-b"}),
            "-b needs a value: a size such as 4096, 64KiB or 1.5MB, at least 1 B");
  EXPECT_EQ(error_of({"--out"}), "--out needs a value: a value");
}

TEST(Flags, HelpAnywhereWinsAndStoresNothing) {
  Options o;
  const std::vector<Flag> flags = flags_of(o);
  for (const Args& args : {Args{"--help"}, Args{"--iters", "5", "-h"}, Args{"--frob", "--help"},
                           Args{"--out", "--help"}}) {
    Result<Parsed> r = parse_flags(flags, args.span());
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(*r, Parsed::kHelp);
  }
  EXPECT_EQ(o.iters, 10);
  EXPECT_EQ(o.path, "");
}

TEST(Flags, CommandHelpListsEveryFlagWithItsFormAndDefault) {
  Options o;
  CommandLine line;
  line.command = "demo";
  line.about = "Demonstrates.\n";
  line.flags = flags_of(o);
  line.notes = "Notes.\n";
  EXPECT_EQ(command_help(line),
            "usage: kolo-bench demo [options]\n"
            "Demonstrates.\n"
            "options:\n"
            "  --iters N       timed calls (an integer >= 1); default 10\n"
            "  --percent P     a bounded number (an integer in [0, 100]); default 10\n"
            "  -b SIZE         message size (a size such as 4096, 64KiB or 1.5MB, at least 1 "
            "B); default 4 KiB\n"
            "  --check         verify\n"
            "  --backend NAME  backend (one of tcp, mpi); default tcp\n"
            "  --out FILE      output file\n"
            "  -h, --help      print this help and exit without running\n"
            "Notes.\n");
}

TEST(Flags, RunCommandPrintsHelpOrTheErrorAndRunsNothing) {
  Options o;
  CommandLine line;
  line.command = "demo";
  line.flags = flags_of(o);
  line.check = [&o]() -> Status {
    return o.iters == 13 ? Status::InvalidArgument("--iters 13 is unlucky") : Status::Ok();
  };
  int runs = 0;
  auto run = [&]() -> Status {
    ++runs;
    return o.iters == 2 ? Status::Internal("broke") : Status::Ok();
  };
  auto call = [&](std::vector<std::string> words) {
    words.insert(words.begin(), "demo");
    std::vector<char*> argv;
    for (std::string& w : words) argv.push_back(w.data());
    return run_command(line, static_cast<int>(argv.size()), argv.data(), run);
  };

  ::testing::internal::CaptureStdout();
  EXPECT_EQ(call({"--help"}), 0);
  EXPECT_EQ(::testing::internal::GetCapturedStdout(), command_help(line));

  ::testing::internal::CaptureStderr();
  EXPECT_EQ(call({"--iters", "0"}), 2);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(),
            "kolo-bench demo: --iters '0' is invalid: expected an integer >= 1\n");

  ::testing::internal::CaptureStderr();
  EXPECT_EQ(call({"--iters", "13"}), 2);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "kolo-bench demo: --iters 13 is unlucky\n");
  EXPECT_EQ(runs, 0);

  ::testing::internal::CaptureStderr();
  EXPECT_EQ(call({"--iters", "2"}), 1);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "kolo-bench demo: Internal: broke\n");
  EXPECT_EQ(call({"--iters", "3"}), 0);
  EXPECT_EQ(runs, 2);
}

TEST(CollectiveOptions, FlagsFillTheOptions) {
  CollectiveOptions o;
  o.collective = Collective::kReducescatter;
  const CommandLine line = collective_command_line(o);
  Args args{"--backend", "mpi", "-b", "1KiB", "-e", "1MiB", "-f",      "4",      "-n",       "3",
            "-w",        "0",   "-d", "bf16", "-o", "max",  "--check", "--json", "rows.json"};
  Result<Parsed> r = parse_flags(line.flags, args.span());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(line.check().ok());
  EXPECT_EQ(o.backend, "mpi");
  EXPECT_EQ(o.min_bytes, 1024u);
  EXPECT_EQ(o.max_bytes, 1048576u);
  EXPECT_EQ(o.factor, 4);
  EXPECT_EQ(o.iters, 3);
  EXPECT_EQ(o.warmup, 0);
  EXPECT_EQ(o.dtype, DataType::kBFloat16);
  EXPECT_EQ(o.op, ReduceOp::kMax);
  EXPECT_TRUE(o.check);
  EXPECT_EQ(o.json_path, "rows.json");
}

TEST(CollectiveOptions, BadValuesAndAnInvertedRangeAreErrors) {
  auto error = [](std::initializer_list<std::string> words) -> std::string {
    CollectiveOptions o;
    const CommandLine line = collective_command_line(o);
    Args args(words);
    Result<Parsed> r = parse_flags(line.flags, args.span());
    if (!r.ok()) return r.status().message();
    Status checked = line.check();
    return checked.ok() ? "" : checked.message();
  };
  EXPECT_EQ(error({"-n", "0"}), "-n '0' is invalid: expected an integer >= 1");
  EXPECT_EQ(error({"-w", "-1"}), "-w '-1' is invalid: expected an integer >= 0");
  EXPECT_EQ(error({"-f", "1"}), "-f '1' is invalid: expected an integer >= 2");
  EXPECT_EQ(error({"--backend", "gloo"}),
            "--backend 'gloo' is invalid: expected one of " + backend_names());
  EXPECT_EQ(error({"-d", "float33"}),
            "-d 'float33' is invalid: expected one of uint8, int8, int32, int64, float16, "
            "bfloat16, float32, float64, int16");
  EXPECT_EQ(error({"-o", "mean"}),
            "-o 'mean' is invalid: expected one of sum, average, min, max, product");
  EXPECT_EQ(error({"-b", "1MiB", "-e", "4KiB"}),
            "-b 1048576 and -e 4096 are invalid: expected -b <= -e");
  EXPECT_EQ(error({"-b", "4KiB", "-e", "4KiB"}), "");
}

TEST(CollectiveOptions, HelpNamesTheCommandEveryFlagAndItsDefault) {
  CollectiveOptions o;
  o.collective = Collective::kAlltoall;
  const std::string help = command_help(collective_command_line(o));
  EXPECT_EQ(help.rfind("usage: kolo-bench alltoall [options]\n", 0), 0u) << help;
  for (const std::string& line : std::vector<std::string>{
           "  --backend NAME  backend to time (one of " + backend_names() + "); default tcp\n",
           "  -b SIZE         smallest message (a size such as 4096, 64KiB or 1.5MB, at least 1 "
           "B)\n"
           "                  default 4 KiB\n",
           "  -e SIZE         largest message (a size such as 4096, 64KiB or 1.5MB, at least 1 B)\n"
           "                  default 256 MiB\n",
           "  -d DTYPE        element type\n"
           "                  (one of uint8, int8, int32, int64, float16, bfloat16, float32, "
           "float64, int16)\n"
           "                  default float32\n",
           "  -o OP           reduction, allreduce and reducescatter only\n"
           "                  (one of sum, average, min, max, product); default sum\n",
           "  -f N            size multiplier between rows (an integer >= 2); default 2\n",
           "  -n N            timed iterations per size (an integer >= 1); default 20\n",
           "  -w N            warm-up iterations per size (an integer >= 0); default 5\n",
           "  --check         deterministic inputs; count wrong output elements\n",
           "  --json FILE     write every row as a JSON array of objects (rank 0)\n",
           "  -h, --help      print this help and exit without running\n"})
    EXPECT_NE(help.find(line), std::string::npos) << line << "\n" << help;
  std::istringstream lines(help);
  for (std::string line; std::getline(lines, line);) EXPECT_LE(line.size(), 100u) << line;
}

TEST(JsonRows, AnUnwritablePathIsAnIoErrorNamingIt) {
  Status s = write_json_rows("/nonexistent-kolo-dir/rows.json", nlohmann::json::array());
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_EQ(s.message(),
            "--json: cannot write '/nonexistent-kolo-dir/rows.json': No such file or directory");
}

}  // namespace
}  // namespace kolo::bench
