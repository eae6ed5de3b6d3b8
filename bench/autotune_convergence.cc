#include "bench/autotune_convergence.h"

namespace kolo::bench {

Convergence judge_convergence(const TuningRun& run) {
  const std::string within =
      "did not converge within " + std::to_string(run.tune_steps) + " steps: ";
  const std::string raise = "; raise --tune-steps";
  if (run.changes_after_window == 0)
    return {false, within + "the tuner applied no configuration in them or the " +
                       std::to_string(run.window_steps) + " after" + raise};
  if (run.changes_after_window > run.changes_at_end) {  // a history only grows
    const size_t late = run.changes_after_window - run.changes_at_end;
    return {false, within + "it applied " + std::to_string(late) + " more configuration" +
                       (late == 1 ? "" : "s") + " in the " + std::to_string(run.window_steps) +
                       " steps after (" + std::to_string(run.changes_after_window) + " in all)" +
                       raise};
  }
  return {true, "steps to converge " + std::to_string(run.last_change_step) + " (" +
                    std::to_string(run.changes_at_end) + " configurations applied)"};
}

}  // namespace kolo::bench
