// AutotuneSearch: the autotuner's decision logic, pure (no clock, no I/O, no threads): it is
// fed one measured step time at a time and says which configuration to run next. The runtime's
// Tuner (autotune.h) measures and ships; unit tests drive this class with synthetic noisy score
// functions.
//
// Note [Autotune search]
// A configuration is a point on a grid: one index per dimension (fusion threshold, cycle time,
// bucket size on log-spaced grids, each grid step a factor of 2; categorical knobs by choice).
// The search measures, in order:
//   1. the default configuration (every ratio is reported against it, and it is the fallback);
//   2. the start point an analytic prior predicts (predict_start(): latency + bytes/bandwidth);
//   3. a pattern search from the better of the two: around the best point it tries +-stride
//      grid steps along each dimension (every other choice of a categorical one), moves to any
//      candidate that beats the best by more than the noise margin and tries the same direction
//      again first; when no neighbour wins it halves the stride (4, 2, 1 grid steps). A
//      categorical choice may move the numeric optimum (the hierarchical allreduce wants larger
//      buffers than the flat one), so that the other choice loses at the first descent's
//      optimum yet wins at its own: when that descent ends, each other choice of each
//      categorical dimension gets a descent of its own (stride 2, then 1) from the best point
//      with that choice, and the best of all descents goes on. Then, at stride 1 and budget
//      permitting, it measures the best and its neighbours once more afresh;
//   4. a confirmation: the best point, the default (twice as long) and the best again are
//      measured one right after the other, and the default wins unless the best (its two
//      measurements pooled) beats it by the margin in these three alone. Earlier samples may
//      come from a machine under another load (a default measured while another job ran makes
//      every later point look better), and the best's measurements bracket the default's, so
//      a load that rises or falls meanwhile weighs on both alike. A gain between half the
//      margin and the margin gets a second round (budget permitting), pooled with the first,
//      and must then beat margin / sqrt(2), as the medians' noise shrinks with the samples.
//      So the final configuration is never slower than the default beyond noise, and a real
//      gain of the order of the noise is still taken when the budget allows.
// Each configuration is scored by the median of `samples` step times after `warmup` discarded
// steps (the first step after a change pays for new buckets and cache misses; skip_warmup()
// when a change brings no new names); a candidate within twice the margin of the best is
// measured twice as long before it is judged, and one whose samples (two at least) are all
// slower than the best by three margins is judged at once, a clear loser. The margin is
// max(min_gain, the median half relative range of the configurations measured so far), so on a
// noisy machine the search demands larger gains instead of chasing noise. A point already
// measured is not measured again (except in the confirmation). The budget (max_steps, the
// runtime's KOLO_AUTOTUNE_STEPS, 90 by default) bounds the steps: the search keeps room for the
// confirmation and goes to it when another candidate would not fit, so a search of 90 steps
// settles by about step 95 (issue 30: within 100 steps). The runtime starts at stride 2 (4 goes
// to the ends of its box first). A categorical alternative's descent adds half the budget.
//
// Thread-safety: none; one owner.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kolo::coord {

struct SearchDimension {
  std::string name;             // "threshold", for logs
  std::vector<int64_t> values;  // the grid (ascending for numeric dimensions)
  size_t default_index = 0;
  bool categorical = false;
};

using SearchPoint = std::vector<size_t>;  // an index into each dimension's values

struct SearchOptions {
  int warmup = 1;          // steps discarded after each change
  int samples = 3;         // steps scored per configuration (their median)
  double min_gain = 0.02;  // smallest relative gain that counts as better
  // Budget in steps, skip_step()s included; past it, the search goes straight to the
  // confirmation. Each other choice of a categorical dimension adds half of it (its descent).
  int max_steps = 200;
  int lag = 0;             // skipped steps expected per change (for the budget)
  int initial_stride = 4;  // grid steps
};

// One finished measurement, for the log.
struct SearchTrial {
  SearchPoint point;
  double seconds = 0;  // median step time
  int steps = 0;       // steps spent on it, warm-up included
  bool best_so_far = false;
  bool confirmation = false;
};

// The grid lo, lo*2, lo*4, ... up to hi (hi included even when not a power-of-two multiple);
// {0} followed by the grid when with_zero. Requires 0 < lo <= hi.
std::vector<int64_t> log_grid(int64_t lo, int64_t hi, bool with_zero = false);
// The index of the grid value nearest to v in log space (0 maps to a leading 0 if any).
size_t nearest_index(const std::vector<int64_t>& values, int64_t v);

class AutotuneSearch {
 public:
  // `start`: the prior's point (may equal the default). Dimensions with a single value are
  // fixed (a knob the user set).
  AutotuneSearch(std::vector<SearchDimension> dims, SearchPoint start, SearchOptions options);

  // The configuration to run now.
  const SearchPoint& current() const { return current_; }
  // One step's wall time under current(). Returns true when current() changed.
  bool record_step(double seconds);
  // A step that ran but cannot be scored (the change to current() had not reached every rank
  // yet): it counts against the budget only.
  void skip_step() { ++steps_; }
  // The change to current() brings no new operation names (no cache misses, nothing to build):
  // its next step is scored, without the warm-up step.
  void skip_warmup() { steps_on_current_ = std::max(steps_on_current_, options_.warmup); }
  bool converged() const { return phase_ == Phase::kDone; }
  // The search is in its confirmation (step 4 of the Note): for logs and tests.
  bool confirming() const {
    return phase_ == Phase::kConfirmBest || phase_ == Phase::kConfirmDefault ||
           phase_ == Phase::kConfirmBestAgain;
  }
  // The trial the last record_step() finished, if any (taken once).
  std::optional<SearchTrial> take_finished() { return std::exchange(finished_, std::nullopt); }

  const SearchPoint& best() const { return best_; }
  double best_seconds() const { return score_of(best_); }
  const SearchPoint& default_point() const { return default_; }
  double default_seconds() const { return score_of(default_); }
  int steps() const { return steps_; }
  const std::vector<SearchDimension>& dims() const { return dims_; }
  double margin() const;

  // Continuous mode: a short local search (stride 1) around the best point, forgetting old
  // scores (the machine changed). current() becomes the best point, measured anew.
  void restart_local();

 private:
  enum class Phase {
    kDefault,
    kStart,
    kRebase,
    kPattern,
    kConfirmBest,
    kConfirmDefault,
    kConfirmBestAgain,
    kDone
  };
  double score_of(const SearchPoint& p) const;
  // The pattern candidate being measured is already far slower than the best (judged early).
  bool clear_loser() const;
  void finish_measurement();
  void advance();  // picks the next point to measure (or finishes)
  // The steps one measurement takes, one pattern candidate (which may be extended) and the
  // confirmation (best, default at twice the samples, best).
  int steps_per_point() const;
  int steps_per_candidate() const;
  int confirmation_steps() const;
  // Another candidate would leave no room for the confirmation.
  bool out_of_budget() const;
  // The pattern search (and the descents of categorical alternatives, then the polish):
  // starts measuring its next point (true), or says that the search is over (false).
  bool descend();
  // The second look at the best's neighbours, when not taken yet and the budget allows (true:
  // measuring the best).
  bool polish();
  // Starts the confirmation of the best against the default (true), or finds nothing to
  // confirm: the best is the default (false).
  bool start_confirmation();
  // After the confirmation's measurements: one more round (true), or the verdict in best_.
  bool judge_confirmation();
  std::vector<SearchPoint> neighbours() const;
  void measure(SearchPoint p);
  // At the end of a descent: keeps the better of it and the earlier ones (champion_); then
  // makes the next categorical alternative best_ (true), or the champion (false: none left).
  bool next_descent();

  const std::vector<SearchDimension> dims_;
  const SearchOptions options_;
  const SearchPoint default_;
  SearchPoint start_;
  const int budget_;  // max_steps, plus half of it per categorical alternative
  Phase phase_ = Phase::kDefault;
  SearchPoint current_;
  SearchPoint best_;
  int stride_;
  bool polished_ = false;  // the second look at stride 1 is done
  int steps_ = 0;
  int budget_from_ = 0;  // steps_ when this search (or its continuous restart) began
  int steps_on_current_ = 0;
  std::vector<double> samples_;  // of current_
  bool extended_ = false;        // current_ is ambiguous and measured twice as long
  std::map<SearchPoint, std::vector<double>> measured_;  // every point's scored samples
  std::vector<SearchPoint> queue_;                       // candidates left at this stride
  std::optional<SearchTrial> finished_;
  std::vector<double> spreads_;  // relative spread of each measurement
  // The confirmation's own samples of the best (both measurements) and the default (not pooled
  // with older ones).
  std::vector<double> confirm_best_, confirm_default_;
  int confirm_rounds_ = 0;  // best-default-best rounds taken (a second when ambiguous)
  // The move that won last, tried again first (pattern search's "keep going").
  std::optional<std::pair<size_t, int>> last_move_;
  // Categorical alternatives still to descend from (planned when the first descent ends), and
  // the best point of the descents finished so far.
  bool descents_planned_ = false;
  std::vector<SearchPoint> descents_;
  std::optional<SearchPoint> champion_;
};

// The analytic prior (Note [Autotune search]). A link with per-message latency L seconds and
// bandwidth B bytes/s moves n bytes in L + n/B. Fusing into buffers of size T turns a step's
// per-tensor latencies into one per buffer; the latency share of a buffer's time is
// L / (L + T/B), which falls below 1/16 from T = 16 L B on, while larger buffers only delay
// the first transfer (less overlap with backward). So the prior threshold and bucket are
// 16 L B, and the cycle time (the batching window) about 2 L: long enough to catch gradients
// that arrive together, short against a transfer.
struct LinkModel {
  double latency_s = 0;
  double bandwidth_bytes_per_s = 0;
};
struct PriorValues {
  int64_t fusion_threshold = 0;
  int64_t cycle_time_ns = 0;
  int64_t bucket_bytes = 0;
};
PriorValues predict_start(const LinkModel& link);

}  // namespace kolo::coord
