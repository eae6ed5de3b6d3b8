// kolo-bench autotune's verdict on the tuner: had it settled when the bench stopped giving it
// steps? The bench sees only kolo::autotune_history(steps_marked()), every rank's record of the
// configurations in effect (the same on every rank at the same step), so it asks what that
// record can answer: whether the tuner applied another one during
// the measurement steps that followed --tune-steps. A tuner that still changes then was still
// searching, and the step of its last change is no "steps to converge" (issue 30): the search
// applies a configuration per trial (a warm-up step and KOLO_AUTOTUNE_SAMPLES more), so the
// 2 x --iters measurement steps see a change unless it has converged.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kolo::bench {

// What the bench observed of one tuning run.
struct TuningRun {
  int tune_steps = 0;               // --tune-steps: the steps the tuner got
  int window_steps = 0;             // the measurement steps after them (2 x --iters)
  size_t changes_at_end = 0;        // autotune_history(steps_marked()).size() after tune_steps
  int64_t last_change_step = 0;     // that history's last from_step (unused when it is empty)
  size_t changes_after_window = 0;  // the same after the window
};

struct Convergence {
  bool converged = false;
  // "steps to converge 196 (12 configurations applied)", or "did not converge within 200
  // steps: ..." saying what was seen and that --tune-steps raises the budget.
  std::string summary;
};

// Converged when the tuner applied at least one configuration and none during the window; the
// steps to converge are then the last change's from_step. Not converged when it applied no
// configuration at all (it never measured) or another one during the window. Pure; the
// bench's only decision about convergence, so that it is unit-tested (autotune_convergence_test).
Convergence judge_convergence(const TuningRun& run);

}  // namespace kolo::bench
