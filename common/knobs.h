// The registry of KOLO_* knobs, NCCL-style: every environment variable Kolo reads is declared
// once, as a row (name, kind of value, default, accepted range, help, category, whether it may
// change while the job runs), and parsed by the one parser of its kind here. kolo::init, the
// backends, the launcher and the README's configuration table all read this registry, so a knob
// cannot be accepted by one and rejected by another.
//
// Where rows live. The core's rows are knob_table.cc's, one per KnobId. A backend declares its
// own rows in its folder (backends/<name>/<name>_knobs.{h,cc}: KOLO_TCP_* in backends/tcp/), as
// `const Knob` objects its code names directly; the build compiles that data-only file into
// this library (kolo_backend(... KNOBS ...), cmake/kolo_helpers.cmake), so every program that
// links the registry sees every row of the build, kolorun included, without linking backends.
//
// A default is written in its row only. init() reads the environment once (from_process_env)
// and hands the KnobSet down (BackendContext::knobs, RuntimeConfig, launched_world(knobs)); code
// reads its values from there. No struct repeats a default, and nothing else in the library
// reads a KOLO_* variable from the environment (tests/house/env_reads.py checks).
//
// Values are read from a snapshot of the environment (KnobSet), validated all at once: an error
// names the variable (or kolorun flag), the value and the accepted form. A retired name set in
// the environment is an error naming its replacement; an unknown KOLO_* variable within edit
// distance 2 of a real one is a warning naming the real one.
//
// Thread-safety: the registry is constant; a KnobSet is an immutable value once read.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "kolo/status.h"

namespace kolo {

// One per core row of knob_table.cc, in the same order (checked at compile time there). A
// backend's rows have no KnobId: code names them by their `const Knob&`.
enum class KnobId : int {
  // core
  kCpuOperations,
  kGpuOperations,
  kFusionThreshold,
  kCycleTime,
  kCacheCapacity,
  kTimeline,
  kTimelineMarkCycles,
  kTimelineSteps,
  kStallCheckTime,
  kStallShutdownTime,
  kMismatchTime,
  kOpTimeout,
  kRendezvousTimeout,
  kLogLevel,
  kProcessSets,
  kHierarchicalAllreduce,
  kHierarchicalAllgather,
  kElasticResetLimit,
  kDeterministic,
  kReduction,
  kTestSubmitDelay,
  // autotuner (issue 11)
  kAutotune,
  kAutotuneLog,
  kAutotuneContinuous,
  kAutotuneSamples,
  kAutotuneSteps,
  kAutotuneFusionFrom,
  kAutotuneFusionTo,
  kAutotuneCycleFrom,
  kAutotuneCycleTo,
  kAutotuneBucketFrom,
  kAutotuneBucketTo,
  // channel backends (tcp, and every backend that runs the ops/ algorithms over a channel)
  kRingThreshold,
  kRingSegment,
  // set by the launcher
  kRank,
  kSize,
  kLocalRank,
  kLocalSize,
  kCrossRank,
  kCrossSize,
  kStoreAddr,
  kSecret,
  kSecretFile,
  kElasticWorker,
  kCount  // not a knob: the number of core rows, and the `id` of a backend's row
};
// The number of core rows (KnobIds); all_knobs() holds these and then the backends' rows.
inline constexpr size_t kKnobCount = static_cast<size_t>(KnobId::kCount);

// How a value is written, and so which parser reads it:
//   kSize      bytes with an optional unit (kolo/units.h): "64MiB", "4096"
//   kDuration  a time with an optional unit (kolo/units.h): "5ms", "60" (seconds)
//   kInteger   a decimal integer
//   kBool      1/true/yes/on or 0/false/no/off
//   kChoice    one of a list of names (Knob::choices)
//   kText      any string (a path, a host name, a secret, a HOST:PORT checked by its reader)
//   kRange     FIRST:END, integers with 0 <= FIRST < END: the half-open range [FIRST, END)
//   kRankSets  lists of ranks: "0,1;2,3", each list non-empty, ranks >= 0, no rank twice in a
//              list (whether the ranks exist is checked by the reader, which knows the world)
enum class KnobKind { kSize, kDuration, kInteger, kBool, kChoice, kText, kRange, kRankSets };

struct KnobRange {
  int64_t first = 0;
  int64_t end = 0;  // exclusive
};

// kBackend: a row that a backend folder declares (Knob::backend names it); kChannelBackend: the
// core's rows for every backend that runs the ops/ algorithms over a channel (KOLO_RING_*).
enum class KnobCategory { kCore, kChannelBackend, kBackend, kLauncher };

// Whether a knob may change while the job runs. kFixedAtInit knobs are read once, when the
// component that uses them starts (init, a backend's factory). kTunableAtRuntime ones are the
// initial value of what the autotuner (KOLO_AUTOTUNE, coordinator/autotune.h) may change later,
// so their readers must not cache them where a change could not reach; one the user set is
// left as set. A tunable kBool or kChoice knob is a categorical dimension of the autotuner's
// search (is_categorical_tunable: every choice is tried, none is "between" two others); a
// tunable size or duration is a numeric one, searched over its KOLO_AUTOTUNE_*_FROM/TO range.
enum class KnobChange { kFixedAtInit, kTunableAtRuntime };

// Whether ranks may hold different values. A kJob knob shapes what the ranks do together (the
// backend they meet on, how tensors are fused, which algorithm a size takes, how frames are
// split), so ranks that differ would run different collectives: wrong results or a hang, not an
// error. init() compares every kJob knob across the job before connecting anything
// (coordinator/knob_agreement.h) and fails on every rank naming the variable and each rank's
// value. kRank knobs are about this process alone (its log, its files, its timeouts).
enum class KnobScope { kRank, kJob };

struct Knob {
  KnobId id = KnobId::kCount;  // a core row's id; kCount for a backend's row
  std::string_view name;       // "KOLO_FUSION_THRESHOLD"
  KnobKind kind;
  KnobCategory category;
  // The backend folder that declares a kBackend row ("tcp"); its name starts KOLO_<BACKEND>_.
  std::string_view backend = {};
  KnobChange change = KnobChange::kFixedAtInit;
  KnobScope scope = KnobScope::kRank;
  // The value when unset, in the knob's own syntax; parsed like a set value. Empty: no value
  // (kText), or, for kLauncher knobs, "required when launched" (the reader decides).
  std::string_view default_text = {};
  // The default as documented, when it is not simply default_text (e.g. chosen at run time).
  std::string_view default_doc = {};
  // Inclusive bounds in the knob's unit (bytes, nanoseconds, integer) for kSize, kDuration and
  // kInteger.
  int64_t min = 0;
  int64_t max = INT64_MAX;
  // The accepted names of a kChoice knob (a function, so that it may be the build's list).
  std::span<const std::string_view> (*choices)() = nullptr;
  std::string_view help = {};  // one line: what it does, and what 0 or empty means
};

// The registry: the core rows in KnobId order, then each backend's rows (backends of this build,
// by name, each in its own order). Built once; the span stays valid for the program's life.
// A backend row kTunableAtRuntime or two rows of one name are a bug of the build (ENFORCE).
std::span<const Knob> all_knobs();
// The core row of `id`.
const Knob& knob(KnobId id);
// The knob named `name` ("KOLO_CYCLE_TIME"), or nullptr.
const Knob* find_knob(std::string_view name);

// Whether the autotuner searches `k` as a categorical dimension (see KnobChange).
bool is_categorical_tunable(const Knob& k);
// The values a categorical knob takes, in the order the autotuner indexes them: "0", "1" for a
// kBool, the choices for a kChoice; empty for other kinds.
std::vector<std::string_view> knob_choices(const Knob& k);

// A retired name and the name of the knob that replaced it. The core's and every backend's
// (a backend folder lists the retired names of its own variables beside its rows).
struct RetiredKnob {
  std::string_view name;
  std::string_view replacement;
};
std::span<const RetiredKnob> retired_knobs();

// What a backend folder's <name>_knobs.cc contributes to the registry: its rows and its retired
// names. The build declares `BackendKnobs backend_knobs_<name>()` for each backend that has
// such a file and lists them in built_backend_knobs() (common/build_info.h).
struct BackendKnobs {
  std::span<const Knob* const> rows;
  std::span<const RetiredKnob> retired = {};
};

// "--fusion-threshold" for KOLO_FUSION_THRESHOLD; empty for kLauncher knobs, which have none.
std::string flag_name(const Knob& k);
// How a value is written, for error messages and help: "a size with an optional unit ... in
// [1 B, 1 GiB], e.g. 4MiB", "one of tcp, mpi".
std::string accepted_form(const Knob& k);
// The default as documented: default_doc, else default_text, else "unset".
std::string_view documented_default(const Knob& k);
// "core", "channel backends", "tcp backend" (a kBackend row: its backend's), "set by the
// launcher".
std::string category_name(const Knob& k);

using RankSets = std::vector<std::vector<int>>;
using KnobValue = std::variant<uint64_t /* size */, std::chrono::nanoseconds, int64_t, bool,
                               std::string, KnobRange, RankSets>;

// Parses `text` as a value of `k`. InvalidArgument "<label> <text> is invalid: expected <form>"
// where label is "NAME=" (the default) or a flag name ("--cycle-time ").
Result<KnobValue> parse_knob(const Knob& k, std::string_view text, std::string_view label = {});

enum class KnobSource { kDefault, kEnvironment, kFlag };

// The KOLO_* variables of this process's environment, by name.
std::map<std::string, std::string> kolo_environment();

// Every knob's value, read once from an environment snapshot and validated.
//
// Each accessor comes in two forms: by KnobId for the core's rows, by `const Knob&` for any row
// of all_knobs() (a backend's rows, e.g. tcp_knobs::kHost). Naming a Knob that is not a row of
// the registry, or reading a row with the accessor of another kind, is a bug (ENFORCE).
class KnobSet {
 public:
  // `env`: KOLO_* variables by name (others are ignored); an empty value counts as unset.
  // `flags`: knob values from kolorun's flags, by variable name; they win over `env` and their
  // errors name the flag. A flag value counts as set even when empty; names in `flags` that are
  // not knobs are ignored (kolorun only passes registry names). Errors (InvalidArgument, every bad
  // value in registry order, joined by "; "): a bad value; a retired name set in `env`.
  static Result<KnobSet> read(const std::map<std::string, std::string>& env,
                              const std::map<std::string, std::string>& flags = {});
  // read(kolo_environment()). Called once per program, where it starts: kolo::init() for the
  // library (which hands the result down), main() for a tool; nowhere else (tests/house/).
  static Result<KnobSet> from_process_env();
  // Every knob at its registry default: read({}), made once. For code and tests that need
  // values without a job (the segment of ops/ algorithms that take no tuning; a RuntimeConfig or
  // BackendContext built by hand). A default that does not parse is a bug of its row (ENFORCE).
  static const KnobSet& defaults();

  // The typed value (set or default).
  uint64_t size(const Knob& k) const;
  std::chrono::nanoseconds duration(const Knob& k) const;
  int64_t integer(const Knob& k) const;
  bool boolean(const Knob& k) const;
  const std::string& text(const Knob& k) const;  // kChoice and kText
  KnobRange range(const Knob& k) const;
  const RankSets& rank_sets(const Knob& k) const;
  uint64_t size(KnobId id) const { return size(knob(id)); }
  std::chrono::nanoseconds duration(KnobId id) const { return duration(knob(id)); }
  int64_t integer(KnobId id) const { return integer(knob(id)); }
  bool boolean(KnobId id) const { return boolean(knob(id)); }
  const std::string& text(KnobId id) const { return text(knob(id)); }
  KnobRange range(KnobId id) const { return range(knob(id)); }
  const RankSets& rank_sets(KnobId id) const { return rank_sets(knob(id)); }

  bool is_set(const Knob& k) const { return entry(k).source != KnobSource::kDefault; }
  KnobSource source(const Knob& k) const { return entry(k).source; }
  // The text the value was parsed from (as given, or default_text).
  const std::string& raw(const Knob& k) const { return entry(k).text; }
  // The value in one spelling per value, so that equal values compare equal however they were
  // written ("4MiB" and "4194304" are both "4194304"; durations in nanoseconds, booleans 0/1);
  // empty when unset without a default.
  std::string canonical(const Knob& k) const;
  bool is_set(KnobId id) const { return is_set(knob(id)); }
  KnobSource source(KnobId id) const { return source(knob(id)); }
  const std::string& raw(KnobId id) const { return raw(knob(id)); }
  std::string canonical(KnobId id) const { return canonical(knob(id)); }

  // "KOLO_CYCLETIME is not a Kolo variable and is ignored; did you mean KOLO_CYCLE_TIME?" for
  // every unknown KOLO_* name within edit distance 2 of a registered one.
  const std::vector<std::string>& warnings() const { return warnings_; }
  // "KOLO_FUSION_THRESHOLD set by environment to 8MiB" for every non-launcher knob that the
  // environment set (NCCL's echo), in registry order.
  std::vector<std::string> echo_lines() const;
  // Every knob but the launcher-set ones, one per line under its category: name, value and
  // where it came from (default, environment, flag --name); then the launcher-set names.
  // This is `kolorun --print-config`.
  std::string describe() const;

 private:
  struct Entry {
    std::string text;
    KnobSource source = KnobSource::kDefault;
    KnobValue value;
    bool has_value = false;  // false: unset with an empty default (a launcher-set knob)
  };
  const Entry& entry(const Knob& k) const;
  const KnobValue& value_of(const Knob& k, KnobKind kind) const;

  std::vector<Entry> entries_;  // one per row of all_knobs(), in its order
  std::vector<std::string> warnings_;
};

// Levenshtein distance, for the near-miss warnings.
size_t edit_distance(std::string_view a, std::string_view b);

// The README's configuration section body: a markdown table of every user-facing knob (name,
// meaning, default) and a sentence listing the launcher-set ones.
std::string knobs_markdown();

}  // namespace kolo
