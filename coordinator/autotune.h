// Tuner: the autotuner as rank 0's background thread runs it (KOLO_AUTOTUNE=1). It turns step
// boundaries into step times, feeds them to AutotuneSearch (autotune_search.h), and hands the
// runtime each new configuration to announce; it writes the log lines, the CSV
// (KOLO_AUTOTUNE_LOG) and the timeline's "autotune score" counter.
//
// Note [Autotune]
// Rank 0 decides; the decision rides in the next slow-path ResponseList (TuneDecision), which
// every rank receives in the same cycle. Fusion threshold and cycle time change in that very
// cycle on every rank, so fusion agrees everywhere (the response lists are identical). The
// bucket size changes at a step boundary, since DistributedOptimizer rebuilds its buckets (and
// so the names it submits) between steps: the decision says "from step S on", S = m0 + 2 where
// m0 is rank 0's count of marked steps when it builds the list. Why every rank is still before
// boundary S then: a rank marks step k only after step k's allreduces completed, which needs
// rank 0's gradients of step k, submitted after rank 0 marked step k - 1 and before this cycle
// began (a cycle executes only what was pending when it started). So any rank has marked at
// most m0 + 1 steps when the decision reaches it, and every rank switches at boundary S. This
// needs every step to run at least one collective across ranks, which DistributedOptimizer does.
// The same argument makes kolo::autotune_history(steps_marked()) (the decisions with
// apply_step <= the rank's count) identical on every rank at the same step, whereas the whole
// history may already hold, on some ranks only, a decision for a step still ahead (issue 30;
// CoordinatorJob.AutotuneRanksAgreeOnTheConfigurationAtEveryStep delays rank 0 so that it does).
//
// Categorical knobs (the registry's tunable kBool/kChoice knobs, config.autotune.categorical)
// travel as TuneDecision::choices and are switched by every rank in that same cycle, before it
// executes the cycle's responses; a knob the user set, or one this job's data plane cannot
// switch, is fixed and named in no decision (docs/architecture.md 7a).
//
// The score is the wall time between rank 0's boundaries. In synchronous data-parallel training
// every step ends with collectives that wait for the slowest rank, so over a few steps rank 0's
// step time is the slowest rank's. The first step under a new configuration is discarded
// (warm-up: new buckets miss the response cache).
//
// Programs that never call kolo::mark_step() (no DistributedOptimizer) get step boundaries from
// the repeating sequence of names instead: the first name executed is the anchor, each of its
// executions is a boundary. The bucket size is then not searched. The log says which is used.
//
// Thread-safety: rank 0's cycle thread only (whoever holds the turn: Note [Waiter drives]).
#pragma once

#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "coordinator/autotune_search.h"
#include "coordinator/config.h"
#include "coordinator/message.h"
#include "timeline/timeline.h"

namespace kolo::coord {

// DistributedOptions::bucket_bytes' default: the bucket size the tuner starts from.
inline constexpr int64_t kDefaultBucketBytes = int64_t{4} << 20;

// A categorical knob's CSV column and timeline counter series: "hierarchical_allreduce" for
// KOLO_HIERARCHICAL_ALLREDUCE.
std::string categorical_column(KnobId id);

class Tuner {
 public:
  using Clock = std::chrono::steady_clock;

  // Opens (truncates) the CSV when config.autotune.log_path is set: IoError naming
  // KOLO_AUTOTUNE_LOG and the path when it cannot be written.
  static Result<std::unique_ptr<Tuner>> create(const RuntimeConfig& config, Timeline& timeline);
  ~Tuner();

  // Once, before the first observe(): the link measured at init, for the prior.
  void set_link(const LinkModel& link) { link_ = link; }
  // Once per cycle: step boundaries marked since the last call (their times), and the
  // responses this cycle executed (for the name-sequence fallback).
  void observe(const std::vector<Clock::time_point>& marks, const std::vector<Response>& executed,
               Clock::time_point now);
  // A configuration to announce is waiting (the runtime then forces a slow-path cycle).
  bool has_decision() const { return pending_.has_value(); }
  // The waiting configuration, to apply from step steps_marked + 2 (Note [Autotune]).
  std::optional<TuneDecision> take_decision(int64_t steps_marked);

 private:
  enum class Mode { kUnknown, kSteps, kNames };
  Tuner(const RuntimeConfig& config, Timeline& timeline, std::FILE* csv);
  void start_search(Mode mode, const std::string& anchor);
  void boundary(Clock::time_point t);
  void step_time(double seconds);
  void log_trial(const SearchTrial& trial);
  TuneDecision decision_for(const SearchPoint& p) const;
  // "threshold 4 MiB, cycle 1 ms, bucket 4 MiB[, hierarchical allreduce on]", for the log.
  std::string describe(const SearchPoint& p) const;
  // "; searching KOLO_HIERARCHICAL_ALLREDUCE too" per categorical knob searched.
  std::string searched_choices() const;
  // The search's dimensions: threshold, cycle, bucket, then from this index on one per
  // config_.autotune.categorical entry, in its order.
  static constexpr size_t kCategorical = 3;
  // The choice index of config_.autotune.categorical[i] at `p`.
  size_t choice_of(const SearchPoint& p, size_t i) const;
  void watch(double seconds);  // continuous mode, after convergence

  const RuntimeConfig config_;
  Timeline& timeline_;
  std::FILE* csv_;  // owned; null without KOLO_AUTOTUNE_LOG
  LinkModel link_;
  Mode mode_ = Mode::kUnknown;
  std::string anchor_;   // kNames: the name whose executions are boundaries
  int anchor_seen_ = 0;  // kUnknown: executions of the first name so far
  std::optional<AutotuneSearch> search_;
  int64_t boundaries_ = 0;  // seen since the search started
  std::optional<Clock::time_point> last_boundary_;
  int64_t measure_from_ = 0;   // first boundary whose following step counts
  int64_t bucket_in_use_ = 0;  // the bucket size of the last decision (the default before any)
  std::optional<TuneDecision> pending_;
  bool announced_converged_ = false;
  std::vector<double> window_;  // continuous mode: step times since convergence
};

}  // namespace kolo::coord
