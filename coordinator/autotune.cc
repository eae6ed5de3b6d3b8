#include "coordinator/autotune.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <sstream>

#include "common/logging.h"
#include "kolo/units.h"

namespace kolo::coord {
namespace {

// The grid of a dimension, with the default value on it (it is the baseline).
SearchDimension dimension(std::string name, std::vector<int64_t> grid, int64_t default_value,
                          bool fixed) {
  SearchDimension d{std::move(name), {default_value}, 0};
  if (fixed) return d;
  if (std::find(grid.begin(), grid.end(), default_value) == grid.end())
    grid.insert(std::upper_bound(grid.begin(), grid.end(), default_value), default_value);
  d.default_index =
      static_cast<size_t>(std::find(grid.begin(), grid.end(), default_value) - grid.begin());
  d.values = std::move(grid);
  return d;
}

std::string percent(double ratio) {
  std::ostringstream os;
  os.precision(1);
  os << std::fixed << (ratio <= 1 ? "-" : "+") << std::abs(1 - ratio) * 100 << "%";
  return os.str();
}

std::string ms(double seconds) {
  std::ostringstream os;
  os.precision(3);
  os << std::fixed << seconds * 1e3 << " ms";
  return os.str();
}

// Continuous mode: a change in step time counts when the median of a whole window of this
// many steps (and at least 4 configurations' worth) differs from the converged one by more
// than kChange.
constexpr size_t kWindowMin = 16;
constexpr double kChange = 0.15;

}  // namespace

std::string categorical_column(KnobId id) {
  std::string name(knob(id).name.substr(5));  // without "KOLO_"
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name;
}

Result<std::unique_ptr<Tuner>> Tuner::create(const RuntimeConfig& config, Timeline& timeline) {
  std::FILE* csv = nullptr;
  const std::string& path = config.autotune.log_path;
  if (!path.empty()) {
    csv = std::fopen(path.c_str(), "w");
    if (!csv)
      return Status::IoError("KOLO_AUTOTUNE_LOG=" + path +
                             ": cannot open for writing: " + std::strerror(errno));
    // Units in the header, so that the file reads without this comment.
    std::string header = "step,fusion_threshold_bytes,cycle_time_us,bucket_bytes,";
    for (const CategoricalTunable& t : config.autotune.categorical)
      header += categorical_column(t.id) + ",";
    header += "step_time_ms,steps,ratio_to_default,best_so_far,phase\n";
    std::fputs(header.c_str(), csv);
    std::fflush(csv);
  }
  return std::unique_ptr<Tuner>(new Tuner(config, timeline, csv));
}

Tuner::Tuner(const RuntimeConfig& config, Timeline& timeline, std::FILE* csv)
    : config_(config), timeline_(timeline), csv_(csv) {}

Tuner::~Tuner() {
  if (csv_) std::fclose(csv_);
}

void Tuner::start_search(Mode mode, const std::string& anchor) {
  mode_ = mode;
  anchor_ = anchor;
  const AutotuneConfig& a = config_.autotune;
  std::vector<SearchDimension> dims = {
      dimension(
          "threshold",
          log_grid(static_cast<int64_t>(a.fusion_min), static_cast<int64_t>(a.fusion_max), true),
          static_cast<int64_t>(config_.fusion_threshold), a.fusion_fixed),
      dimension("cycle", log_grid(a.cycle_min.count(), a.cycle_max.count()),
                config_.cycle_time.count(), a.cycle_fixed),
      // Buckets exist only where DistributedOptimizer marks the steps.
      dimension(
          "bucket",
          log_grid(static_cast<int64_t>(a.bucket_min), static_cast<int64_t>(a.bucket_max), true),
          kDefaultBucketBytes, mode != Mode::kSteps)};
  const PriorValues prior = predict_start(link_);
  SearchPoint start = {nearest_index(dims[0].values, prior.fusion_threshold),
                       nearest_index(dims[1].values, prior.cycle_time_ns),
                       nearest_index(dims[2].values, prior.bucket_bytes)};
  // Then one dimension per categorical tunable of the registry (dims[kCategorical + i] is
  // config_.autotune.categorical[i]); its values are choice indices. The prior says nothing
  // about them: the search starts from the value at init.
  for (const CategoricalTunable& t : a.categorical) {
    SearchDimension d{categorical_column(t.id), {static_cast<int64_t>(t.initial)}, 0, true};
    if (!t.fixed) {
      d.values.clear();
      for (size_t c = 0; c < t.choices.size(); ++c) d.values.push_back(static_cast<int64_t>(c));
      d.default_index = t.initial;
    }
    start.push_back(d.default_index);
    dims.push_back(std::move(d));
  }
  bucket_in_use_ = dims[2].values[dims[2].default_index];  // the job starts on the defaults
  // Stride 2 first: in the budget of KOLO_AUTOTUNE_STEPS a round at stride 4 would go to the
  // ends of the box (no fusion, 64 MiB), which seldom win, instead of the nearer candidates.
  search_.emplace(
      std::move(dims), std::move(start),
      SearchOptions{.samples = a.samples, .max_steps = a.max_steps, .lag = 2, .initial_stride = 2});
  KOLO_LOG_INFO("autotune: link latency "
                << ms(link_.latency_s) << ", bandwidth "
                << format_size(static_cast<uint64_t>(link_.bandwidth_bytes_per_s)) << "/s; "
                << (mode == Mode::kSteps
                        ? std::string("scoring configurations by the time between "
                                      "kolo::mark_step() calls (training steps)")
                        : "no kolo::mark_step() calls seen: scoring configurations by the "
                          "period of the repeating operation '" +
                              anchor + "' (bucket size not tuned)")
                << searched_choices());
}

void Tuner::observe(const std::vector<Clock::time_point>& marks,
                    const std::vector<Response>& executed, Clock::time_point now) {
  if (mode_ == Mode::kUnknown) {
    if (!marks.empty()) {
      start_search(Mode::kSteps, {});
    } else {
      for (const Response& r : executed) {
        if (anchor_.empty()) anchor_ = r.name;
        // A few periods without a single mark: this program does not mark its steps.
        if (r.name == anchor_ && ++anchor_seen_ == 4) start_search(Mode::kNames, anchor_);
      }
      return;
    }
  }
  if (mode_ == Mode::kSteps) {
    for (auto t : marks) boundary(t);
  } else {
    for (const Response& r : executed)
      if (r.name == anchor_) boundary(now);
  }
}

void Tuner::boundary(Clock::time_point t) {
  const int64_t step = boundaries_++;  // the step that ends here
  const auto last = std::exchange(last_boundary_, t);
  if (!last) return;
  if (step < measure_from_ || pending_) {
    // The budget is in training steps, those spent waiting for a change included.
    if (!search_->converged()) search_->skip_step();
    return;
  }
  step_time(std::chrono::duration<double>(t - *last).count());
}

void Tuner::step_time(double seconds) {
  if (search_->converged()) {
    watch(seconds);
    return;
  }
  const bool changed = search_->record_step(seconds);
  if (auto trial = search_->take_finished()) log_trial(*trial);
  if (changed) pending_ = decision_for(search_->current());
  if (search_->converged() && !announced_converged_) {
    announced_converged_ = true;
    const auto& best = search_->best();
    const double t = search_->best_seconds(), d = search_->default_seconds();
    KOLO_LOG_INFO("autotune: converged after " << boundaries_ << " steps: " << describe(best)
                                               << "; step time " << ms(t) << " (default " << ms(d)
                                               << ", " << percent(t / d) << ")");
  }
}

void Tuner::watch(double seconds) {
  if (!config_.autotune.continuous) return;
  window_.push_back(seconds);
  const size_t needed =
      std::max<size_t>(kWindowMin, 4 * static_cast<size_t>(config_.autotune.samples));
  if (window_.size() < needed) return;
  std::vector<double> w = std::exchange(window_, {});
  std::nth_element(w.begin(), w.begin() + w.size() / 2, w.end());
  const double now = w[w.size() / 2], then = search_->best_seconds();
  if (std::abs(now / then - 1) <= kChange) return;
  KOLO_LOG_INFO("autotune: step time changed from "
                << ms(then) << " to " << ms(now) << " for " << needed
                << " steps; searching again near the best configuration");
  search_->restart_local();
  announced_converged_ = false;
}

std::optional<TuneDecision> Tuner::take_decision(int64_t steps_marked) {
  if (!pending_) return std::nullopt;
  TuneDecision d = *std::exchange(pending_, std::nullopt);
  d.apply_step = steps_marked + 2;
  // Steps before the switch ran the previous configuration: not scored. Threshold and cycle time
  // change in this very cycle, so the step after the one in progress runs wholly under them
  // (its collectives are negotiated in later cycles); only new buckets wait for apply_step.
  // Without new buckets the names are those of the last step: the response cache hits, so no
  // warm-up step either.
  const bool new_buckets = d.bucket_bytes != std::exchange(bucket_in_use_, d.bucket_bytes);
  if (mode_ != Mode::kSteps) {
    measure_from_ = boundaries_ + 2;
  } else if (new_buckets) {
    measure_from_ = d.apply_step;
  } else {
    measure_from_ = steps_marked + 1;
    search_->skip_warmup();
  }
  return d;
}

TuneDecision Tuner::decision_for(const SearchPoint& p) const {
  const auto& dims = search_->dims();
  TuneDecision d;
  d.fusion_threshold = static_cast<uint64_t>(dims[0].values[p[0]]);
  d.cycle_time_ns = dims[1].values[p[1]];
  d.bucket_bytes = dims[2].values[p[2]];
  const auto& categorical = config_.autotune.categorical;
  for (size_t i = 0; i < categorical.size(); ++i)
    if (!categorical[i].fixed)
      d.choices.push_back(
          {static_cast<int32_t>(categorical[i].id), static_cast<int32_t>(choice_of(p, i))});
  return d;
}

std::string Tuner::describe(const SearchPoint& p) const {
  const auto& dims = search_->dims();
  std::ostringstream os;
  os << "threshold " << format_size(static_cast<uint64_t>(dims[0].values[p[0]])) << ", cycle "
     << format_duration(std::chrono::nanoseconds(dims[1].values[p[1]])) << ", bucket "
     << format_size(static_cast<uint64_t>(dims[2].values[p[2]]));
  // Only the searched categorical knobs: a job that cannot switch one keeps its lines short.
  const auto& categorical = config_.autotune.categorical;
  for (size_t i = 0; i < categorical.size(); ++i) {
    if (categorical[i].fixed) continue;
    const size_t choice = choice_of(p, i);
    std::string name = categorical_column(categorical[i].id);
    std::replace(name.begin(), name.end(), '_', ' ');
    os << ", " << name << " "
       << (knob(categorical[i].id).kind == KnobKind::kBool ? (choice ? "on" : "off")
                                                           : categorical[i].choices[choice]);
  }
  return os.str();
}

size_t Tuner::choice_of(const SearchPoint& p, size_t i) const {
  return static_cast<size_t>(search_->dims()[kCategorical + i].values[p[kCategorical + i]]);
}

std::string Tuner::searched_choices() const {
  std::string out;
  for (const CategoricalTunable& t : config_.autotune.categorical)
    if (!t.fixed) out += "; searching " + std::string(knob(t.id).name) + " too";
  return out;
}

void Tuner::log_trial(const SearchTrial& trial) {
  const auto& dims = search_->dims();
  const int64_t threshold = dims[0].values[trial.point[0]];
  const int64_t cycle = dims[1].values[trial.point[1]];
  const int64_t bucket = dims[2].values[trial.point[2]];
  const double ratio = trial.seconds / search_->default_seconds();
  const char* phase = trial.confirmation ? "confirm" : search_->converged() ? "final" : "search";
  KOLO_LOG_INFO("autotune: " << describe(trial.point) << ": step time " << ms(trial.seconds) << " ("
                             << trial.steps << " steps), " << percent(ratio) << " vs default"
                             << (trial.best_so_far ? ", best so far" : ""));
  if (csv_) {
    // A categorical column holds the value as the knob is written (0/1 for a bool).
    std::string choices;
    const auto& categorical = config_.autotune.categorical;
    for (size_t i = 0; i < categorical.size(); ++i)
      choices += std::string(categorical[i].choices[choice_of(trial.point, i)]) + ",";
    std::fprintf(csv_, "%lld,%lld,%.3f,%lld,%s%.4f,%d,%.4f,%d,%s\n",
                 static_cast<long long>(boundaries_), static_cast<long long>(threshold),
                 static_cast<double>(cycle) / 1e3, static_cast<long long>(bucket), choices.c_str(),
                 trial.seconds * 1e3, trial.steps, ratio, trial.best_so_far ? 1 : 0, phase);
    std::fflush(csv_);
  }
  timeline_.counter("autotune score", {{"step_time_ms", std::to_string(trial.seconds * 1e3)},
                                       {"ratio_to_default", std::to_string(ratio)}});
}

}  // namespace kolo::coord
