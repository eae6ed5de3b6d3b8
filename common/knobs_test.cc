#include "common/knobs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <set>
#include <sstream>

#include "common/build_info.h"
#include "common/enforce.h"

namespace kolo {
namespace {

using Env = std::map<std::string, std::string>;
using namespace std::chrono_literals;

// Rows that are not the registry's, for the parsers: a bounded size, a bounded duration.
constexpr Knob kBoundedSize = {.name = "KOLO_TEST_SIZE",
                               .kind = KnobKind::kSize,
                               .category = KnobCategory::kCore,
                               .default_text = "4MiB",
                               .min = 4 << 10,
                               .max = 1 << 30,
                               .help = "a test row"};
constexpr Knob kBoundedDuration = {.name = "KOLO_TEST_SPIN",
                                   .kind = KnobKind::kDuration,
                                   .category = KnobCategory::kCore,
                                   .default_text = "0",
                                   .max = 1'000'000'000,
                                   .help = "a test row"};

const Knob& row(KnobId id) { return knob(id); }
const Knob& row(const Knob& k) { return k; }

std::string error_of(const Env& env, const Env& flags = {}) {
  Result<KnobSet> r = KnobSet::read(env, flags);
  EXPECT_FALSE(r.ok());
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  return r.status().message();
}

TEST(Knobs, TableIsWellFormedAndEveryDefaultParses) {
  size_t backend_rows = 0;
  for (const BackendKnobs& b : built_backend_knobs()) backend_rows += b.rows.size();
  ASSERT_EQ(all_knobs().size(), kKnobCount + backend_rows);
  std::set<std::string_view> names;
  for (const Knob& k : all_knobs()) {
    EXPECT_TRUE(names.insert(k.name).second) << k.name;
    EXPECT_EQ(k.name.rfind("KOLO_", 0), 0u) << k.name;
    EXPECT_FALSE(k.help.empty()) << k.name;
    if (k.id != KnobId::kCount) EXPECT_EQ(&knob(k.id), &k);
    EXPECT_EQ(find_knob(k.name), &k);
    EXPECT_EQ(k.kind == KnobKind::kChoice, k.choices != nullptr) << k.name;
    if (!k.default_text.empty()) {
      EXPECT_TRUE(parse_knob(k, k.default_text).ok()) << k.name;
    }
  }
  EXPECT_EQ(find_knob("KOLO_NOPE"), nullptr);
  Result<KnobSet> set = KnobSet::read({});
  ASSERT_TRUE(set.ok()) << set.status().to_string();
  EXPECT_EQ(set->size(KnobId::kFusionThreshold), 4u << 20);
  EXPECT_EQ(set->duration(KnobId::kCycleTime), 1ms);
  EXPECT_EQ(set->integer(KnobId::kCacheCapacity), 1024);
  EXPECT_FALSE(set->boolean(KnobId::kTimelineMarkCycles));
  // The default backends depend on the launcher, the hosts and the GPUs: decided at init.
  EXPECT_FALSE(set->is_set(KnobId::kCpuOperations));
  EXPECT_EQ(set->canonical(KnobId::kCpuOperations), "");
  EXPECT_EQ(set->canonical(KnobId::kGpuOperations), "");
  EXPECT_EQ(set->text(KnobId::kTimeline), "");
  EXPECT_EQ(set->size(KnobId::kRingSegment), 256u << 10);
  EXPECT_FALSE(set->is_set(KnobId::kRank));
  EXPECT_EQ(set->source(KnobId::kCycleTime), KnobSource::kDefault);
  EXPECT_TRUE(set->warnings().empty());
  EXPECT_TRUE(set->echo_lines().empty());
  EXPECT_FALSE(set->is_set(KnobId::kProcessSets));
}

// A backend's rows (backends/<name>/<name>_knobs.cc, compiled into this library by the build)
// follow the core's: named KOLO_<BACKEND>_*, of a backend of the build, without a KnobId, never
// tunable at run time; and a KnobSet reads them like the core's, by their Knob.
TEST(Knobs, BackendRowsFollowTheCoresAndBelongToABackendOfTheBuild) {
  const std::vector<std::string_view> built(built_backends().begin(), built_backends().end());
  for (size_t i = 0; i < all_knobs().size(); ++i) {
    const Knob& k = all_knobs()[i];
    EXPECT_EQ(i < kKnobCount, k.category != KnobCategory::kBackend) << k.name;
    if (k.category != KnobCategory::kBackend) {
      EXPECT_TRUE(k.backend.empty()) << k.name;
      continue;
    }
    std::string prefix = "KOLO_";
    for (char c : k.backend) prefix += static_cast<char>(std::toupper(c));
    EXPECT_EQ(k.name.rfind(prefix + "_", 0), 0u) << k.name;
    EXPECT_NE(std::find(built.begin(), built.end(), k.backend), built.end()) << k.name;
    EXPECT_EQ(k.id, KnobId::kCount) << k.name;
    EXPECT_EQ(k.change, KnobChange::kFixedAtInit) << k.name;
    EXPECT_EQ(category_name(k), std::string(k.backend) + " backend");
    Result<KnobSet> set = KnobSet::read({});
    ASSERT_TRUE(set.ok());
    EXPECT_FALSE(set->is_set(k)) << k.name;
    EXPECT_EQ(set->raw(k), k.default_text) << k.name;
  }
}

// Every accessor takes a row of the registry, or a copy of one; anything else is a bug.
TEST(Knobs, AccessorsTakeRowsOfTheRegistry) {
  const KnobSet& d = KnobSet::defaults();
  const Knob copy = knob(KnobId::kCacheCapacity);
  EXPECT_EQ(d.integer(copy), d.integer(KnobId::kCacheCapacity));
  EXPECT_EQ(&KnobSet::defaults(), &d);
  try {
    (void)d.size(kBoundedSize);
    ADD_FAILURE() << "a row outside the registry was read";
  } catch (const Error& e) {
    EXPECT_NE(e.status().message().find("KOLO_TEST_SIZE is not a row of the knob registry"),
              std::string::npos)
        << e.status().message();
  }
  try {
    (void)d.size(KnobId::kCycleTime);
    ADD_FAILURE() << "a duration was read as a size";
  } catch (const Error& e) {
    EXPECT_NE(e.status().message().find("KOLO_CYCLE_TIME is not read with this accessor"),
              std::string::npos)
        << e.status().message();
  }
}

TEST(Knobs, ProcessSetsParseIntoListsOfRanks) {
  Result<KnobSet> set = KnobSet::read({{"KOLO_PROCESS_SETS", "0,2;1;3,1"}});
  ASSERT_TRUE(set.ok()) << set.status().to_string();
  EXPECT_EQ(set->rank_sets(KnobId::kProcessSets),
            (RankSets{{0, 2}, {1}, {3, 1}}));  // as given: add_process_set sorts
}

TEST(Knobs, OnlyTheAutotunersKnobsMayChangeWhileTheJobRuns) {
  std::vector<std::string_view> tunable;
  for (const Knob& k : all_knobs())
    if (k.change == KnobChange::kTunableAtRuntime) tunable.push_back(k.name);
  EXPECT_EQ(tunable, (std::vector<std::string_view>{"KOLO_FUSION_THRESHOLD", "KOLO_CYCLE_TIME",
                                                    "KOLO_HIERARCHICAL_ALLREDUCE"}));
}

// A tunable bool or choice is a categorical dimension of the autotuner's search; a tunable size
// or duration is not, nor is a bool that may not change at run time.
TEST(Knobs, CategoricalTunablesAreTheTunableBoolsAndChoices) {
  std::vector<std::string_view> categorical;
  for (const Knob& k : all_knobs())
    if (is_categorical_tunable(k)) categorical.push_back(k.name);
  EXPECT_EQ(categorical, (std::vector<std::string_view>{"KOLO_HIERARCHICAL_ALLREDUCE"}));
  EXPECT_EQ(knob_choices(knob(KnobId::kHierarchicalAllreduce)),
            (std::vector<std::string_view>{"0", "1"}));
  EXPECT_EQ(knob_choices(knob(KnobId::kLogLevel)).front(), "trace");
  EXPECT_TRUE(knob_choices(knob(KnobId::kFusionThreshold)).empty());
  EXPECT_FALSE(is_categorical_tunable(knob(KnobId::kTimelineMarkCycles)));
}

TEST(Knobs, FlagNamesDeriveFromTheVariableAndLauncherKnobsHaveNone) {
  EXPECT_EQ(flag_name(knob(KnobId::kFusionThreshold)), "--fusion-threshold");
  EXPECT_EQ(flag_name(knob(KnobId::kRingSegment)), "--ring-segment");
  EXPECT_EQ(flag_name(kBoundedSize), "--test-size");
  EXPECT_EQ(flag_name(knob(KnobId::kRank)), "");
  EXPECT_EQ(flag_name(knob(KnobId::kSecret)), "");
}

TEST(Knobs, EachKindParsesItsValues) {
  auto value = [](const auto& k, std::string_view text) {
    Result<KnobValue> v = parse_knob(row(k), text);
    EXPECT_TRUE(v.ok()) << v.status().to_string();
    return v.ok() ? *v : KnobValue{};
  };
  EXPECT_EQ(std::get<uint64_t>(value(KnobId::kFusionThreshold, "8MiB")), 8u << 20);
  EXPECT_EQ(std::get<uint64_t>(value(KnobId::kFusionThreshold, "0")), 0u);
  EXPECT_EQ(std::get<uint64_t>(value(kBoundedSize, "4KiB")), 4096u);
  EXPECT_EQ(std::get<uint64_t>(value(kBoundedSize, "1GiB")), 1u << 30);
  EXPECT_EQ(std::get<std::chrono::nanoseconds>(value(KnobId::kCycleTime, "2.5ms")), 2500us);
  EXPECT_EQ(std::get<std::chrono::nanoseconds>(value(kBoundedDuration, "1s")), 1s);
  EXPECT_EQ(std::get<int64_t>(value(KnobId::kCacheCapacity, "16777216")), 16777216);
  for (const char* t : {"1", "true", "yes", "on"})
    EXPECT_TRUE(std::get<bool>(value(knob(KnobId::kAutotune), t))) << t;
  for (const char* f : {"0", "false", "no", "off"})
    EXPECT_FALSE(std::get<bool>(value(knob(KnobId::kAutotune), f))) << f;
  EXPECT_EQ(std::get<std::string>(value(KnobId::kLogLevel, "info")), "info");
  EXPECT_EQ(std::get<std::string>(value(KnobId::kTimeline, "/t/{rank}.json")), "/t/{rank}.json");
  for (std::string_view backend : built_backends())
    EXPECT_EQ(std::get<std::string>(value(KnobId::kCpuOperations, backend)), backend);
  KnobRange window = std::get<KnobRange>(value(KnobId::kTimelineSteps, "100:120"));
  EXPECT_EQ(window.first, 100);
  EXPECT_EQ(window.end, 120);
  EXPECT_EQ(std::get<KnobRange>(value(KnobId::kTimelineSteps, "0:1")).end, 1);
}

TEST(Knobs, EachKindsErrorNamesTheVariableTheValueAndTheAcceptedForm) {
  auto error = [](const auto& k, std::string_view text, std::string_view label = {}) {
    Result<KnobValue> v = parse_knob(row(k), text, label);
    EXPECT_FALSE(v.ok()) << text;
    return v.ok() ? "" : v.status().message();
  };
  const std::string size = "a size with an optional unit (B, KB, KiB, MB, MiB, GB, GiB, TB, TiB)";
  const std::string duration =
      "a duration with an optional unit (ns, us, ms, s, min, h; none: seconds)";
  EXPECT_EQ(error(KnobId::kFusionThreshold, "lots"),
            "KOLO_FUSION_THRESHOLD=lots is invalid: expected " + size + ", e.g. 64MiB");
  EXPECT_EQ(error(KnobId::kFusionThreshold, "-1"),
            "KOLO_FUSION_THRESHOLD=-1 is invalid: expected " + size + ", e.g. 64MiB");
  EXPECT_EQ(error(KnobId::kRingSegment, "0"),
            "KOLO_RING_SEGMENT=0 is invalid: expected " + size + " > 0, e.g. 64MiB");
  EXPECT_EQ(error(kBoundedSize, "1000"),
            "KOLO_TEST_SIZE=1000 is invalid: expected " + size + " in [4 KiB, 1 GiB], e.g. 64MiB");
  EXPECT_EQ(error(kBoundedSize, "2GiB"),
            "KOLO_TEST_SIZE=2GiB is invalid: expected " + size + " in [4 KiB, 1 GiB], e.g. 64MiB");
  EXPECT_EQ(error(KnobId::kCycleTime, "soon"),
            "KOLO_CYCLE_TIME=soon is invalid: expected " + duration + ", e.g. 5ms");
  EXPECT_EQ(error(KnobId::kOpTimeout, "0"),
            "KOLO_OP_TIMEOUT=0 is invalid: expected " + duration + " > 0, e.g. 5ms");
  EXPECT_EQ(error(kBoundedDuration, "2s"),
            "KOLO_TEST_SPIN=2s is invalid: expected " + duration + " in [0 ns, 1.0 s], e.g. 5ms");
  EXPECT_EQ(error(KnobId::kCacheCapacity, "-1"),
            "KOLO_CACHE_CAPACITY=-1 is invalid: expected an integer in [0, 16777216]");
  EXPECT_EQ(error(KnobId::kCacheCapacity, "12x"),
            "KOLO_CACHE_CAPACITY=12x is invalid: expected an integer in [0, 16777216]");
  EXPECT_EQ(error(KnobId::kRank, "abc"), "KOLO_RANK=abc is invalid: expected an integer >= 0");
  EXPECT_EQ(error(KnobId::kSize, "0"), "KOLO_SIZE=0 is invalid: expected an integer > 0");
  EXPECT_EQ(error(knob(KnobId::kAutotune), "2"),
            "KOLO_AUTOTUNE=2 is invalid: expected 1/true/yes/on or 0/false/no/off");
  EXPECT_EQ(
      error(KnobId::kHierarchicalAllreduce, "maybe"),
      "KOLO_HIERARCHICAL_ALLREDUCE=maybe is invalid: expected 1/true/yes/on or 0/false/no/off");
  EXPECT_EQ(error(KnobId::kLogLevel, "loud"),
            "KOLO_LOG_LEVEL=loud is invalid: expected one of trace, debug, info, warning, error, "
            "off");
  for (const char* bad : {"100", "5:5", "7:3", "-1:4", "a:b", "1:", ":2", "1:2:3"}) {
    EXPECT_EQ(error(KnobId::kTimelineSteps, bad),
              "KOLO_TIMELINE_STEPS=" + std::string(bad) +
                  " is invalid: expected FIRST:END, integers with 0 <= FIRST < END (FIRST to "
                  "END-1), e.g. 100:120");
  }
  for (const char* bad : {"0,0", "0;;1", ";", "0,", ",1", "a", "-1", "0;1,2,1", "1 2"}) {
    EXPECT_EQ(error(KnobId::kProcessSets, bad),
              "KOLO_PROCESS_SETS=" + std::string(bad) +
                  " is invalid: expected lists of ranks separated by ';', ranks separated by ',', "
                  "no rank twice in a list, e.g. 0,1;2,3");
  }
  EXPECT_EQ(error(KnobId::kCycleTime, "soon", "--cycle-time"),
            "--cycle-time soon is invalid: expected " + duration + ", e.g. 5ms");
}

TEST(Knobs, CpuOperationsAcceptsExactlyTheBackendsOfThisBuild) {
  std::string names;
  for (std::string_view b : built_backends()) names += (names.empty() ? "" : ", ") + std::string(b);
  EXPECT_EQ(error_of({{"KOLO_CPU_OPERATIONS", "gloo"}}),
            "KOLO_CPU_OPERATIONS=gloo is invalid: expected one of " + names);
}

TEST(Knobs, FlagsWinOverTheEnvironmentAndTheirErrorsNameTheFlag) {
  Result<KnobSet> set = KnobSet::read(
      {{"KOLO_CYCLE_TIME", "5ms"}, {"KOLO_FUSION_THRESHOLD", "1MiB"}, {"KOLO_TIMELINE", ""}},
      {{"KOLO_FUSION_THRESHOLD", "8MiB"}});
  ASSERT_TRUE(set.ok()) << set.status().to_string();
  EXPECT_EQ(set->duration(KnobId::kCycleTime), 5ms);
  EXPECT_EQ(set->source(KnobId::kCycleTime), KnobSource::kEnvironment);
  EXPECT_EQ(set->size(KnobId::kFusionThreshold), 8u << 20);
  EXPECT_EQ(set->source(KnobId::kFusionThreshold), KnobSource::kFlag);
  EXPECT_EQ(set->raw(KnobId::kFusionThreshold), "8MiB");
  EXPECT_FALSE(set->is_set(KnobId::kTimeline)) << "an empty value counts as unset";
  EXPECT_EQ(error_of({}, {{"KOLO_CACHE_CAPACITY", "many"}}),
            "--cache-capacity many is invalid: expected an integer in [0, 16777216]");
}

TEST(Knobs, EveryBadValueIsReportedAtOnce) {
  EXPECT_EQ(error_of({{"KOLO_CACHE_CAPACITY", "x"}, {"KOLO_AUTOTUNE", "maybe"}}),
            "KOLO_CACHE_CAPACITY=x is invalid: expected an integer in [0, 16777216]; "
            "KOLO_AUTOTUNE=maybe is invalid: expected 1/true/yes/on or 0/false/no/off");
}

TEST(Knobs, RetiredNamesAreErrorsNamingTheirReplacement) {
  EXPECT_EQ(error_of({{"KOLO_SEGMENT_BYTES", "4096"}}),
            "KOLO_SEGMENT_BYTES was renamed KOLO_RING_SEGMENT: set KOLO_RING_SEGMENT=4096 instead");
  EXPECT_EQ(error_of({{"KOLO_SMALL_MESSAGE_BYTES", "0"}}),
            "KOLO_SMALL_MESSAGE_BYTES was renamed KOLO_RING_THRESHOLD: set KOLO_RING_THRESHOLD=0 "
            "instead");
  // The merged pair's one rule: the segment must be > 0, the threshold may be 0.
  Result<KnobSet> zero = KnobSet::read({{"KOLO_RING_THRESHOLD", "0"}});
  ASSERT_TRUE(zero.ok()) << zero.status().to_string();
  EXPECT_EQ(zero->size(KnobId::kRingThreshold), 0u);
  EXPECT_NE(error_of({{"KOLO_RING_SEGMENT", "0"}}).find("KOLO_RING_SEGMENT=0 is invalid"),
            std::string::npos);
}

TEST(Knobs, NearMissesOfRealNamesAreWarningsAndOtherNamesAreIgnored) {
  Result<KnobSet> set = KnobSet::read({{"KOLO_FUSION_TRESHOLD", "8MiB"},
                                       {"KOLO_CYCLETIME", "1ms"},
                                       {"KOLO_AUTOTUNE_SAMPLE", "4"},
                                       {"KOLO_MY_OWN_SETTING", "1"},
                                       {"KOLO_RANK", "0"}});
  ASSERT_TRUE(set.ok()) << set.status().to_string();
  EXPECT_EQ(set->warnings(),
            (std::vector<std::string>{
                "KOLO_AUTOTUNE_SAMPLE is not a Kolo variable and is ignored; did you mean "
                "KOLO_AUTOTUNE_SAMPLES?",
                "KOLO_CYCLETIME is not a Kolo variable and is ignored; did you mean "
                "KOLO_CYCLE_TIME?",
                "KOLO_FUSION_TRESHOLD is not a Kolo variable and is ignored; did you mean "
                "KOLO_FUSION_THRESHOLD?"}));
  EXPECT_EQ(edit_distance("KOLO_SIZE", "KOLO_SIZE"), 0u);
  EXPECT_EQ(edit_distance("KOLO_CYCLETIME", "KOLO_CYCLE_TIME"), 1u);
  EXPECT_EQ(edit_distance("abc", "acb"), 2u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  // Real names are far enough apart that a near miss names one knob unambiguously, except
  // the CPU/GPU pair, which mirrors Horovod's HOROVOD_{CPU,GPU}_OPERATIONS on purpose (issue
  // 12): a name equally near both (KOLO_XPU_OPERATIONS) is pointed at the first, CPU.
  auto parallel_pair = [](const Knob& a, const Knob& b) {
    return (a.id == KnobId::kCpuOperations && b.id == KnobId::kGpuOperations) ||
           (a.id == KnobId::kGpuOperations && b.id == KnobId::kCpuOperations);
  };
  for (const Knob& a : all_knobs())
    for (const Knob& b : all_knobs())
      if (&a != &b && !parallel_pair(a, b)) {
        EXPECT_GT(edit_distance(a.name, b.name), 2u) << a.name << " " << b.name;
      }
}

TEST(Knobs, EchoListsWhatTheEnvironmentSetButNotTheLauncher) {
  Result<KnobSet> set =
      KnobSet::read({{"KOLO_FUSION_THRESHOLD", "8MiB"}, {"KOLO_RANK", "1"}, {"KOLO_AUTOTUNE", "0"}},
                    {{"KOLO_CYCLE_TIME", "2ms"}});
  ASSERT_TRUE(set.ok()) << set.status().to_string();
  EXPECT_EQ(set->echo_lines(),
            (std::vector<std::string>{"KOLO_FUSION_THRESHOLD set by environment to 8MiB",
                                      "KOLO_AUTOTUNE set by environment to 0"}));
}

TEST(Knobs, DescribeShowsEveryValueAndWhereItCameFrom) {
  Result<KnobSet> set =
      KnobSet::read({{"KOLO_FUSION_THRESHOLD", "8MiB"}}, {{"KOLO_CYCLE_TIME", "2ms"}});
  ASSERT_TRUE(set.ok()) << set.status().to_string();
  const std::string text = set->describe();
  EXPECT_EQ(text.rfind("# core\nKOLO_CPU_OPERATIONS       (unset)       default\n", 0), 0u) << text;
  for (const char* line :
       {"KOLO_FUSION_THRESHOLD     8MiB          environment\n",
        "KOLO_CYCLE_TIME           2ms           flag --cycle-time\n",
        "KOLO_TIMELINE             (unset)       default\n",
        "\n# channel backends\nKOLO_RING_THRESHOLD       64KiB         default\n"})
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
  // Each backend's rows under its own header, after the core's.
  std::set<std::string> headers = {"core", "channel backends"};
  for (const Knob& k : all_knobs()) {
    if (k.category != KnobCategory::kBackend) continue;
    headers.insert(category_name(k));
    EXPECT_NE(text.find("# " + category_name(k) + "\n"), std::string::npos) << k.name;
    EXPECT_GT(text.find(std::string(k.name) + " "), text.find("# " + category_name(k) + "\n"));
  }
  EXPECT_NE(text.find("\n# set by the launcher for each rank: KOLO_RANK, KOLO_SIZE, "
                      "KOLO_LOCAL_RANK, KOLO_LOCAL_SIZE, KOLO_CROSS_RANK, KOLO_CROSS_SIZE, "
                      "KOLO_STORE_ADDR, KOLO_SECRET, KOLO_SECRET_FILE, KOLO_ELASTIC_WORKER\n"),
            std::string::npos)
      << text;
  size_t lines = 0;
  for (char c : text) lines += c == '\n';
  // One line per knob but the 10 launcher-set ones (KOLO_SECRET_FILE: srun's), a header and a
  // blank line per category, the launcher line.
  EXPECT_EQ(lines, all_knobs().size() - 10 + 2 * headers.size() + 1);
}

TEST(Knobs, ReadmeConfigurationTableIsTheRegistrys) {
  std::ifstream in(KOLO_README_PATH);
  ASSERT_TRUE(in) << "cannot read " << KOLO_README_PATH;
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string readme = buffer.str();
  const std::string begin_marker = "<!-- knobs:begin";
  const std::string end_marker = "<!-- knobs:end -->";
  const size_t begin = readme.find(begin_marker);
  const size_t end = readme.find(end_marker);
  ASSERT_NE(begin, std::string::npos) << "README.md lacks " << begin_marker;
  ASSERT_NE(end, std::string::npos) << "README.md lacks " << end_marker;
  const size_t body = readme.find('\n', begin) + 1;
  EXPECT_EQ(readme.substr(body, end - body), knobs_markdown())
      << "README.md's configuration table differs from the registry: paste the output of "
         "`kolorun --print-config=markdown` between the knobs markers";
}

}  // namespace
}  // namespace kolo
