#include "common/knobs.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <sstream>
#include <type_traits>
#include <variant>

#include "common/enforce.h"
#include "kolo/units.h"

extern char** environ;

namespace kolo {
namespace {

constexpr std::string_view kPrefix = "KOLO_";

std::string join(std::span<const std::string_view> names, std::string_view sep) {
  std::string out;
  for (std::string_view n : names) {
    if (!out.empty()) out += sep;
    out += n;
  }
  return out;
}

// " in [lo, hi]", " >= lo", " > 0" or "" for the bounds of a numeric knob, written with `fmt`.
template <typename Format>
std::string range_text(const Knob& k, int64_t unbounded_max, Format fmt) {
  const bool has_max = k.max < unbounded_max;
  if (k.min == 0 && !has_max) return "";
  if (!has_max) return k.min == 1 ? " > 0" : " >= " + fmt(k.min);
  return " in [" + fmt(k.min) + ", " + fmt(k.max) + "]";
}

Result<int64_t> parse_integer(std::string_view text) {
  int64_t out = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size())
    return Status::InvalidArgument("not an integer");
  return out;
}

Result<bool> parse_bool(std::string_view text) {
  for (std::string_view t : {"1", "true", "yes", "on"})
    if (text == t) return true;
  for (std::string_view f : {"0", "false", "no", "off"})
    if (text == f) return false;
  return Status::InvalidArgument("not a bool");
}

// The position of `k` in all_knobs(): a row itself, or a copy of one (found by its name, which
// is unique in the registry).
size_t row_index(const Knob& k) {
  const std::span<const Knob> rows = all_knobs();
  if (&k >= rows.data() && &k < rows.data() + rows.size())
    return static_cast<size_t>(&k - rows.data());
  for (size_t i = 0; i < rows.size(); ++i)
    if (rows[i].name == k.name) return i;
  KOLO_ENFORCE(false,
               k.name << " is not a row of the knob registry (is its backend in the build?)");
  return 0;
}

}  // namespace

const Knob& knob(KnobId id) {
  KOLO_ENFORCE(id != KnobId::kCount);
  return all_knobs()[static_cast<size_t>(id)];
}

const Knob* find_knob(std::string_view name) {
  for (const Knob& k : all_knobs())
    if (k.name == name) return &k;
  return nullptr;
}

bool is_categorical_tunable(const Knob& k) {
  return k.change == KnobChange::kTunableAtRuntime &&
         (k.kind == KnobKind::kBool || k.kind == KnobKind::kChoice);
}

std::vector<std::string_view> knob_choices(const Knob& k) {
  if (k.kind == KnobKind::kBool) return {"0", "1"};
  if (k.kind == KnobKind::kChoice) {
    std::span<const std::string_view> names = k.choices();
    return {names.begin(), names.end()};
  }
  return {};
}

std::string flag_name(const Knob& k) {
  if (k.category == KnobCategory::kLauncher) return "";
  std::string flag = "--";
  for (char c : k.name.substr(kPrefix.size()))
    flag += c == '_' ? '-' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return flag;
}

std::string accepted_form(const Knob& k) {
  switch (k.kind) {
    case KnobKind::kSize:
      return "a size with an optional unit (B, KB, KiB, MB, MiB, GB, GiB, TB, TiB)" +
             range_text(k, INT64_MAX,
                        [](int64_t v) { return format_size(static_cast<uint64_t>(v)); }) +
             ", e.g. 64MiB";
    case KnobKind::kDuration:
      return "a duration with an optional unit (ns, us, ms, s, min, h; none: seconds)" +
             range_text(k, INT64_MAX,
                        [](int64_t v) { return format_duration(std::chrono::nanoseconds(v)); }) +
             ", e.g. 5ms";
    case KnobKind::kInteger: {
      const std::string r = range_text(k, INT32_MAX, [](int64_t v) { return std::to_string(v); });
      return "an integer" + (r.empty() ? " >= 0" : r);
    }
    case KnobKind::kBool:
      return "1/true/yes/on or 0/false/no/off";
    case KnobKind::kChoice:
      return "one of " + join(k.choices(), ", ");
    case KnobKind::kText:
      return "any text";
    case KnobKind::kRange:
      return "FIRST:END, integers with 0 <= FIRST < END (FIRST to END-1), e.g. 100:120";
    case KnobKind::kRankSets:
      return "lists of ranks separated by ';', ranks separated by ',', no rank twice in a list, "
             "e.g. 0,1;2,3";
  }
  return "";
}

std::string_view documented_default(const Knob& k) {
  if (!k.default_doc.empty()) return k.default_doc;
  if (!k.default_text.empty()) return k.default_text;
  return "unset";
}

std::string category_name(const Knob& k) {
  switch (k.category) {
    case KnobCategory::kCore:
      return "core";
    case KnobCategory::kChannelBackend:
      return "channel backends";
    case KnobCategory::kBackend:
      return std::string(k.backend) + " backend";
    case KnobCategory::kLauncher:
      return "set by the launcher";
  }
  return "";
}

Result<KnobValue> parse_knob(const Knob& k, std::string_view text, std::string_view label) {
  auto bad = [&]() {
    std::string where = label.empty() ? std::string(k.name) + "=" : std::string(label) + " ";
    return Status::InvalidArgument(where + std::string(text) + " is invalid: expected " +
                                   accepted_form(k));
  };
  auto in_range = [&](int64_t v) { return v >= k.min && v <= k.max; };
  switch (k.kind) {
    case KnobKind::kSize: {
      Result<uint64_t> v = parse_size(text);
      if (!v.ok() || *v > static_cast<uint64_t>(INT64_MAX) || !in_range(static_cast<int64_t>(*v)))
        return bad();
      return KnobValue(*v);
    }
    case KnobKind::kDuration: {
      Result<std::chrono::nanoseconds> v = parse_duration(text);
      if (!v.ok() || !in_range(v->count())) return bad();
      return KnobValue(*v);
    }
    case KnobKind::kInteger: {
      Result<int64_t> v = parse_integer(text);
      if (!v.ok() || !in_range(*v)) return bad();
      return KnobValue(*v);
    }
    case KnobKind::kBool: {
      Result<bool> v = parse_bool(text);
      if (!v.ok()) return bad();
      return KnobValue(*v);
    }
    case KnobKind::kChoice: {
      std::span<const std::string_view> names = k.choices();
      if (std::find(names.begin(), names.end(), text) == names.end()) return bad();
      return KnobValue(std::string(text));
    }
    case KnobKind::kText:
      return KnobValue(std::string(text));
    case KnobKind::kRange: {
      const size_t colon = text.find(':');
      if (colon == std::string_view::npos) return bad();
      Result<int64_t> first = parse_integer(text.substr(0, colon));
      Result<int64_t> end = parse_integer(text.substr(colon + 1));
      if (!first.ok() || !end.ok() || *first < 0 || *first >= *end) return bad();
      return KnobValue(KnobRange{*first, *end});
    }
    case KnobKind::kRankSets: {
      RankSets sets;
      for (std::string_view rest = text; !rest.empty();) {
        const size_t semi = rest.find(';');
        std::string_view list = rest.substr(0, semi);
        rest = semi == std::string_view::npos ? std::string_view() : rest.substr(semi + 1);
        std::vector<int> ranks;
        for (std::string_view items = list;;) {
          const size_t comma = items.find(',');
          Result<int64_t> r = parse_integer(items.substr(0, comma));
          if (!r.ok() || *r < 0 || *r > INT32_MAX ||
              std::find(ranks.begin(), ranks.end(), *r) != ranks.end())
            return bad();
          ranks.push_back(static_cast<int>(*r));
          if (comma == std::string_view::npos) break;
          items = items.substr(comma + 1);
        }
        sets.push_back(std::move(ranks));
      }
      if (sets.empty()) return bad();
      return KnobValue(std::move(sets));
    }
  }
  return bad();
}

std::map<std::string, std::string> kolo_environment() {
  std::map<std::string, std::string> out;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string_view kv(*e);
    if (kv.substr(0, kPrefix.size()) != kPrefix) continue;
    const size_t eq = kv.find('=');
    if (eq == std::string_view::npos) continue;
    out.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return out;
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

Result<KnobSet> KnobSet::read(const std::map<std::string, std::string>& env,
                              const std::map<std::string, std::string>& flags) {
  KnobSet set;
  std::vector<std::string> errors;
  for (const RetiredKnob& r : retired_knobs()) {
    auto it = env.find(std::string(r.name));
    if (it == env.end() || it->second.empty()) continue;
    const std::string now(r.replacement);
    errors.push_back(std::string(r.name) + " was renamed " + now + ": set " + now + "=" +
                     it->second + " instead");
  }
  const std::span<const Knob> rows = all_knobs();
  set.entries_.resize(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const Knob& k = rows[i];
    Entry& e = set.entries_[i];
    const std::string name(k.name);
    std::string label;
    if (auto f = flags.find(name); f != flags.end()) {
      e.text = f->second;
      e.source = KnobSource::kFlag;
      label = flag_name(k);
    } else if (auto v = env.find(name); v != env.end() && !v->second.empty()) {
      e.text = v->second;
      e.source = KnobSource::kEnvironment;
    } else {
      e.text = std::string(k.default_text);
      if (e.text.empty() && k.kind != KnobKind::kText) continue;  // no value: check is_set()
    }
    Result<KnobValue> value = parse_knob(k, e.text, label);
    if (value.ok()) {
      e.value = std::move(*value);
      e.has_value = true;
    } else {
      errors.push_back(value.status().message());
    }
  }
  if (!errors.empty()) {
    std::string message;
    for (const std::string& m : errors) message += (message.empty() ? "" : "; ") + m;
    return Status::InvalidArgument(message);
  }
  for (const auto& [name, value] : env) {
    if (name.substr(0, kPrefix.size()) != kPrefix || find_knob(name) != nullptr) continue;
    bool retired = false;
    for (const RetiredKnob& r : retired_knobs()) retired |= r.name == name;
    if (retired) continue;
    const Knob* nearest = nullptr;
    size_t best = 3;  // a near miss is within edit distance 2
    for (const Knob& k : all_knobs()) {
      const size_t d = edit_distance(name, k.name);
      if (d < best) {
        best = d;
        nearest = &k;
      }
    }
    if (nearest != nullptr)
      set.warnings_.push_back(name + " is not a Kolo variable and is ignored; did you mean " +
                              std::string(nearest->name) + "?");
  }
  return set;
}

Result<KnobSet> KnobSet::from_process_env() { return read(kolo_environment()); }

const KnobSet& KnobSet::defaults() {
  static const KnobSet kDefaults = [] {
    Result<KnobSet> set = read({});
    KOLO_ENFORCE(set.ok(), "a registry default does not parse: " << set.status().message());
    return std::move(set).value();
  }();
  return kDefaults;
}

const KnobSet::Entry& KnobSet::entry(const Knob& k) const {
  const size_t i = row_index(k);
  KOLO_ENFORCE(i < entries_.size(), k.name << ": this KnobSet was not read");
  return entries_[i];
}

const KnobValue& KnobSet::value_of(const Knob& k, KnobKind kind) const {
  KOLO_ENFORCE(k.kind == kind || (kind == KnobKind::kText && k.kind == KnobKind::kChoice),
               k.name << " is not read with this accessor");
  const Entry& e = entry(k);
  KOLO_ENFORCE(e.has_value, k.name << " is unset and has no default: ask is_set() first");
  return e.value;
}

uint64_t KnobSet::size(const Knob& k) const {
  return std::get<uint64_t>(value_of(k, KnobKind::kSize));
}
std::chrono::nanoseconds KnobSet::duration(const Knob& k) const {
  return std::get<std::chrono::nanoseconds>(value_of(k, KnobKind::kDuration));
}
int64_t KnobSet::integer(const Knob& k) const {
  return std::get<int64_t>(value_of(k, KnobKind::kInteger));
}
bool KnobSet::boolean(const Knob& k) const { return std::get<bool>(value_of(k, KnobKind::kBool)); }
const std::string& KnobSet::text(const Knob& k) const {
  return std::get<std::string>(value_of(k, KnobKind::kText));
}

KnobRange KnobSet::range(const Knob& k) const {
  return std::get<KnobRange>(value_of(k, KnobKind::kRange));
}

const RankSets& KnobSet::rank_sets(const Knob& k) const {
  return std::get<RankSets>(value_of(k, KnobKind::kRankSets));
}

std::string KnobSet::canonical(const Knob& k) const {
  const Entry& e = entry(k);
  if (!e.has_value) return {};
  return std::visit(
      [](const auto& v) -> std::string {
        using V = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<V, uint64_t> || std::is_same_v<V, int64_t>) {
          return std::to_string(v);
        } else if constexpr (std::is_same_v<V, std::chrono::nanoseconds>) {
          return std::to_string(v.count()) + "ns";
        } else if constexpr (std::is_same_v<V, bool>) {
          return v ? "1" : "0";
        } else if constexpr (std::is_same_v<V, std::string>) {
          return v;
        } else if constexpr (std::is_same_v<V, KnobRange>) {
          return std::to_string(v.first) + ":" + std::to_string(v.end);
        } else {  // RankSets
          std::string out;
          for (const std::vector<int>& set : v) {
            if (!out.empty()) out += ';';
            for (size_t i = 0; i < set.size(); ++i) {
              if (i) out += ',';
              out += std::to_string(set[i]);
            }
          }
          return out;
        }
      },
      e.value);
}

std::vector<std::string> KnobSet::echo_lines() const {
  std::vector<std::string> lines;
  for (const Knob& k : all_knobs())
    if (k.category != KnobCategory::kLauncher && source(k) == KnobSource::kEnvironment)
      lines.push_back(std::string(k.name) + " set by environment to " + raw(k));
  return lines;
}

std::string KnobSet::describe() const {
  std::ostringstream out;
  std::string launcher;
  std::string category;
  for (const Knob& k : all_knobs()) {
    if (k.category == KnobCategory::kLauncher) {
      launcher += (launcher.empty() ? "" : ", ") + std::string(k.name);
      continue;
    }
    if (category_name(k) != category) {
      category = category_name(k);
      out << (out.tellp() > 0 ? "\n" : "") << "# " << category << "\n";
    }
    std::string from = "default";
    if (source(k) == KnobSource::kEnvironment) from = "environment";
    if (source(k) == KnobSource::kFlag) from = "flag " + flag_name(k);
    const std::string value = raw(k).empty() ? "(unset)" : raw(k);
    out << k.name << std::string(k.name.size() < 26 ? 26 - k.name.size() : 1, ' ') << value
        << std::string(value.size() < 14 ? 14 - value.size() : 1, ' ') << from << "\n";
  }
  out << "\n# set by the launcher for each rank: " << launcher << "\n";
  return out.str();
}

std::string knobs_markdown() {
  std::string out = "| variable | meaning | default |\n|---|---|---|\n";
  std::string launcher, job;
  for (const Knob& k : all_knobs()) {
    // (append, not "`" + ...: GCC 12 warns falsely about the latter, -Wrestrict)
    const std::string name = std::string("`").append(k.name).append("`");
    if (k.scope == KnobScope::kJob) job += (job.empty() ? "" : ", ") + name;
    // KOLO_SECRET_FILE is the one launcher knob that kolorun does not set: the user sets it for
    // srun's tasks (rendezvous/slurm_world.h), as the sentence below says.
    if (k.category == KnobCategory::kLauncher && k.id == KnobId::kSecretFile) continue;
    if (k.category == KnobCategory::kLauncher) {
      launcher += (launcher.empty() ? "" : ", ") + name;
      continue;
    }
    const std::string def = k.default_doc.empty()
                                ? std::string("`").append(k.default_text).append("`")
                                : std::string(k.default_doc);
    out += "| " + name + " | " + std::string(k.help) + " | " + def + " |\n";
  }
  return out + "\nEvery rank must give " + job +
         " the same value (set or not): `kolo::init()` compares them across the job before "
         "connecting and fails on every rank, naming the variable and each rank's value.\n" +
         "\n`kolorun` sets " + launcher +
         " for each rank; set them by hand only to start ranks without it. Under `srun` alone "
         "(docs/clusters.md) set `KOLO_SECRET`, or `KOLO_SECRET_FILE` (the path of a file only "
         "you can read, mode 600), for every task; Slurm gives the rest.\n";
}

}  // namespace kolo
