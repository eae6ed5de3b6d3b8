#include "coordinator/autotune_search.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/enforce.h"

namespace kolo::coord {
namespace {

double median(std::vector<double> v) {
  if (v.empty()) return std::numeric_limits<double>::infinity();
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

std::vector<int64_t> log_grid(int64_t lo, int64_t hi, bool with_zero) {
  KOLO_ENFORCE(lo > 0 && lo <= hi, "log_grid(" << lo << ", " << hi << ")");
  std::vector<int64_t> grid;
  if (with_zero) grid.push_back(0);
  for (int64_t v = lo; v<hi; v = v> INT64_MAX / 2 ? hi : v * 2) grid.push_back(v);
  grid.push_back(hi);
  return grid;
}

size_t nearest_index(const std::vector<int64_t>& values, int64_t v) {
  size_t best = 0;
  double best_distance = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < values.size(); ++i) {
    double d;
    if (values[i] == v) {
      d = 0;
    } else if (values[i] <= 0 || v <= 0) {
      d = std::numeric_limits<double>::max();  // 0 only matches 0
    } else {
      d = std::abs(std::log2(static_cast<double>(values[i])) - std::log2(static_cast<double>(v)));
    }
    if (d < best_distance) {
      best_distance = d;
      best = i;
    }
  }
  return best;
}

AutotuneSearch::AutotuneSearch(std::vector<SearchDimension> dims, SearchPoint start,
                               SearchOptions options)
    : dims_(std::move(dims)),
      options_(options),
      default_([&] {
        SearchPoint p;
        for (const auto& d : dims_) p.push_back(d.default_index);
        return p;
      }()),
      start_(std::move(start)),
      budget_([&] {
        int alternatives = 0;
        for (const auto& d : dims_)
          if (d.categorical) alternatives += static_cast<int>(d.values.size()) - 1;
        return options.max_steps + alternatives * (options.max_steps / 2);
      }()),
      stride_(options.initial_stride) {
  KOLO_ENFORCE(start_.size() == dims_.size(), "AutotuneSearch: start point has "
                                                  << start_.size() << " coordinates, expected "
                                                  << dims_.size());
  for (size_t d = 0; d < dims_.size(); ++d)
    KOLO_ENFORCE(!dims_[d].values.empty() && dims_[d].default_index < dims_[d].values.size() &&
                     start_[d] < dims_[d].values.size(),
                 "AutotuneSearch: dimension " << dims_[d].name << " index out of range");
  KOLO_ENFORCE(options_.samples >= 1 && options_.warmup >= 0,
               "AutotuneSearch: samples must be >= 1 and warmup >= 0");
  best_ = default_;
  measure(default_);
}

double AutotuneSearch::score_of(const SearchPoint& p) const {
  auto it = measured_.find(p);
  return it == measured_.end() ? std::numeric_limits<double>::infinity() : median(it->second);
}

double AutotuneSearch::margin() const {
  return std::max(options_.min_gain, spreads_.empty() ? 0.0 : median(spreads_));
}

void AutotuneSearch::measure(SearchPoint p) {
  current_ = std::move(p);
  samples_.clear();
  steps_on_current_ = 0;
  extended_ = false;
}

bool AutotuneSearch::record_step(double seconds) {
  if (phase_ == Phase::kDone) return false;
  ++steps_;
  if (++steps_on_current_ <= options_.warmup) return false;
  samples_.push_back(seconds);
  const bool loser = clear_loser();
  if (static_cast<int>(samples_.size()) < options_.samples && !loser) return false;
  // Noise-aware: a candidate whose median lands within twice the margin of the best's is
  // ambiguous; it gets as many steps again (no warm-up: same configuration) before judging.
  if (phase_ == Phase::kPattern && !extended_ && !loser && current_ != best_ &&
      std::abs(median(samples_) / score_of(best_) - 1) < 2 * margin()) {
    extended_ = true;
    return false;
  }
  if (static_cast<int>(samples_.size()) < options_.samples * (extended_ ? 2 : 1) && !loser)
    return false;
  const SearchPoint before = current_;
  finish_measurement();
  advance();
  return current_ != before;
}

bool AutotuneSearch::clear_loser() const {
  // Every sample so far (two at least) slower than the best by three margins: the remaining
  // ones would not save it, and on a shared machine a step slow by chance seldom comes twice in
  // a row. Most of a pattern search's candidates are such losers, so this is where the budget
  // goes further (issue 30: settled within 100 steps).
  if (phase_ != Phase::kPattern || current_ == best_ || samples_.size() < 2) return false;
  return *std::min_element(samples_.begin(), samples_.end()) > score_of(best_) * (1 + 3 * margin());
}

void AutotuneSearch::finish_measurement() {
  const double m = median(samples_);
  const auto [lo, hi] = std::minmax_element(samples_.begin(), samples_.end());
  // Half the relative range: about one standard deviation of the noise for 3 to 5 samples (so
  // not from a clear loser's two).
  if (m > 0 && static_cast<int>(samples_.size()) >= options_.samples)
    spreads_.push_back((*hi - *lo) / (2 * m));
  auto& all = measured_[current_];
  all.insert(all.end(), samples_.begin(), samples_.end());
  if (phase_ == Phase::kConfirmBest || phase_ == Phase::kConfirmBestAgain)
    confirm_best_.insert(confirm_best_.end(), samples_.begin(), samples_.end());
  if (phase_ == Phase::kConfirmDefault)
    confirm_default_.insert(confirm_default_.end(), samples_.begin(), samples_.end());
  finished_ = SearchTrial{current_, m, steps_on_current_, false, confirming()};
  // An extended (ambiguous) candidate has twice the samples; it moves the search when it is
  // simply faster: the best's score is biased low (it won by being measured low), so demanding
  // the margin again would reject true small gains near the optimum.
  const double bar = extended_ ? 1.0 : 1 - margin();
  if (phase_ == Phase::kPattern && current_ != best_ &&
      score_of(current_) < score_of(best_) * bar) {
    for (size_t d = 0; d < dims_.size(); ++d)
      if (current_[d] != best_[d]) last_move_ = {d, current_[d] > best_[d] ? 1 : -1};
    best_ = current_;
    queue_ = neighbours();
  }
  if (phase_ == Phase::kDefault || phase_ == Phase::kStart)
    best_ = score_of(start_) < score_of(default_) ? start_ : default_;
  // During a categorical alternative's descent best_ is that descent's best, not the search's.
  finished_->best_so_far =
      finished_->point == best_ && !(champion_ && score_of(*champion_) < score_of(best_));
}

std::vector<SearchPoint> AutotuneSearch::neighbours() const {
  std::vector<SearchPoint> out;
  auto add = [&](size_t d, int direction) {
    const auto n = static_cast<int64_t>(dims_[d].values.size());
    const auto here = static_cast<int64_t>(best_[d]);
    const int64_t step = dims_[d].categorical ? 1 : stride_;
    const int64_t to = std::clamp<int64_t>(here + direction * step, 0, n - 1);
    if (to == here) return;
    SearchPoint p = best_;
    p[d] = static_cast<size_t>(to);
    out.push_back(std::move(p));
  };
  if (last_move_) add(last_move_->first, last_move_->second);
  for (size_t d = 0; d < dims_.size(); ++d) {
    if (dims_[d].values.size() < 2) continue;  // fixed by the user
    if (dims_[d].categorical) {
      for (size_t c = 0; c < dims_[d].values.size(); ++c) {
        if (c == best_[d]) continue;
        SearchPoint p = best_;
        p[d] = c;
        out.push_back(std::move(p));
      }
      continue;
    }
    add(d, +1);
    add(d, -1);
  }
  return out;
}

void AutotuneSearch::advance() {
  switch (phase_) {
    case Phase::kDefault:
      if (start_ != default_ && !out_of_budget()) {
        phase_ = Phase::kStart;
        measure(start_);
        return;
      }
      [[fallthrough]];
    case Phase::kStart:
    case Phase::kRebase:
      phase_ = Phase::kPattern;
      queue_ = neighbours();
      [[fallthrough]];
    case Phase::kPattern:
      if (descend() || start_confirmation()) return;
      break;
    case Phase::kConfirmBest:
      phase_ = Phase::kConfirmDefault;
      measure(default_);
      extended_ = true;  // as many samples as the best's two measurements together
      return;
    case Phase::kConfirmDefault:
      phase_ = Phase::kConfirmBestAgain;
      measure(best_);
      return;
    case Phase::kConfirmBestAgain:
      if (judge_confirmation()) return;
      break;
    case Phase::kDone:
      break;
  }
  phase_ = Phase::kDone;
  current_ = best_;
  queue_.clear();
}

int AutotuneSearch::steps_per_point() const {
  return options_.lag + options_.warmup + options_.samples;
}

int AutotuneSearch::steps_per_candidate() const {
  // A pattern candidate may be extended to twice its samples.
  return steps_per_point() + options_.samples;
}

int AutotuneSearch::confirmation_steps() const {
  // The confirmation costs three measurements (best, default at twice the samples, best).
  return 2 * steps_per_point() + steps_per_candidate();
}

bool AutotuneSearch::out_of_budget() const {
  // Keeps room for the confirmation.
  return steps_ - budget_from_ + steps_per_candidate() + confirmation_steps() > budget_;
}

bool AutotuneSearch::descend() {
  const bool no_budget = out_of_budget();
  while (!no_budget) {
    while (!queue_.empty()) {
      SearchPoint next = std::move(queue_.front());
      queue_.erase(queue_.begin());
      if (measured_.count(next)) continue;
      measure(std::move(next));
      return true;
    }
    if (stride_ > 1) {
      stride_ /= 2;
      queue_ = neighbours();
      continue;
    }
    // This descent has ended; the next categorical alternative gets one of its own.
    if (next_descent()) {
      if (!measured_.count(best_)) {
        phase_ = Phase::kRebase;
        measure(best_);
        return true;
      }
      queue_ = neighbours();
      continue;
    }
    return polish();
  }
  return false;
}

bool AutotuneSearch::polish() {
  // A second look with the budget left: the best and its nearest neighbours measured afresh
  // (the best's samples pooled), since near the optimum the differences are of the order of
  // the noise and one unlucky sample decides. Two neighbours per dimension that can move (a
  // fixed one has none).
  const auto movable = std::count_if(dims_.begin(), dims_.end(),
                                     [](const SearchDimension& d) { return d.values.size() >= 2; });
  const int polish_cost = 2 * static_cast<int>(movable) * steps_per_candidate() +
                          steps_per_point() + confirmation_steps();
  if (polished_ || steps_ - budget_from_ + polish_cost > budget_) return false;
  polished_ = true;
  queue_ = neighbours();
  // The default keeps its samples: every ratio is reported against it, and the confirmation
  // measures it again anyway.
  for (const auto& p : queue_)
    if (p != default_) measured_.erase(p);
  measure(best_);
  return true;
}

bool AutotuneSearch::start_confirmation() {
  // Out of budget in the middle of a descent: an earlier one's result may be better.
  if (champion_ && score_of(*champion_) < score_of(best_)) best_ = *champion_;
  if (best_ == default_) return false;  // nothing to confirm against
  phase_ = Phase::kConfirmBest;
  confirm_best_.clear();
  confirm_default_.clear();
  confirm_rounds_ = 1;
  measure(best_);
  return true;
}

bool AutotuneSearch::judge_confirmation() {
  // Only the confirmation's own measurements: earlier samples of either may come from a
  // machine under another load. The best's bracket the default's, so a load that changes
  // steadily meanwhile weighs on both alike. The default stays unless the best wins by the
  // margin, which shrinks as 1/sqrt(rounds) (the medians' noise does).
  const double gain = 1 - median(confirm_best_) / median(confirm_default_);
  const double needed = margin() / std::sqrt(static_cast<double>(confirm_rounds_));
  // A gain within the noise but more than half of it: one more round, budget permitting,
  // rather than keeping the default over a gain that more samples would show.
  if (gain < needed && gain > needed / 2 && confirm_rounds_ == 1 &&
      steps_ - budget_from_ + confirmation_steps() <= budget_) {
    ++confirm_rounds_;
    phase_ = Phase::kConfirmBest;
    measure(best_);
    return true;
  }
  if (!(gain >= needed)) best_ = default_;
  return false;
}

bool AutotuneSearch::next_descent() {
  if (!descents_planned_) {
    descents_planned_ = true;
    for (size_t d = 0; d < dims_.size(); ++d) {
      if (!dims_[d].categorical) continue;
      for (size_t c = 0; c < dims_[d].values.size(); ++c) {
        if (c == best_[d]) continue;
        SearchPoint p = best_;
        p[d] = c;
        descents_.push_back(std::move(p));
      }
    }
  }
  if (!champion_ || score_of(best_) < score_of(*champion_)) champion_ = best_;
  if (descents_.empty()) {
    best_ = *champion_;
    return false;
  }
  best_ = std::move(descents_.front());
  descents_.erase(descents_.begin());
  stride_ = std::min(2, options_.initial_stride);
  last_move_.reset();
  return true;
}

void AutotuneSearch::restart_local() {
  measured_.clear();
  spreads_.clear();
  last_move_.reset();
  // A local search only: the categorical neighbours are still tried, but no descent of their own.
  descents_planned_ = true;
  descents_.clear();
  champion_.reset();
  stride_ = 1;
  polished_ = false;
  budget_from_ = steps_;
  phase_ = Phase::kRebase;
  measure(best_);
}

PriorValues predict_start(const LinkModel& link) {
  const double crossover = link.latency_s * link.bandwidth_bytes_per_s;  // bytes
  PriorValues v;
  v.fusion_threshold = static_cast<int64_t>(std::clamp(16 * crossover, 1.0, 1e12));
  v.bucket_bytes = v.fusion_threshold;
  v.cycle_time_ns = static_cast<int64_t>(std::clamp(2 * link.latency_s * 1e9, 1.0, 1e10));
  return v;
}

}  // namespace kolo::coord
