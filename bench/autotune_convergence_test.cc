#include "bench/autotune_convergence.h"

#include <gtest/gtest.h>

namespace kolo::bench {
namespace {

// The run of issue 30: the last change before the window took effect at step 196 of 200, and the
// tuner changed again while the bench measured. That is no convergence at step 196.
TEST(AutotuneConvergence, ATunerStillChangingAfterTheStepsDidNotConverge) {
  const Convergence c = judge_convergence({.tune_steps = 200,
                                           .window_steps = 10,
                                           .changes_at_end = 14,
                                           .last_change_step = 196,
                                           .changes_after_window = 16});
  EXPECT_FALSE(c.converged);
  EXPECT_EQ(c.summary,
            "did not converge within 200 steps: it applied 2 more configurations in the 10 "
            "steps after (16 in all); raise --tune-steps");
  EXPECT_EQ(judge_convergence({.tune_steps = 50,
                               .window_steps = 6,
                               .changes_at_end = 3,
                               .last_change_step = 49,
                               .changes_after_window = 4})
                .summary,
            "did not converge within 50 steps: it applied 1 more configuration in the 6 steps "
            "after (4 in all); raise --tune-steps");
}

// The same last change, and a window without one: the tuner had settled at step 196.
TEST(AutotuneConvergence, ATunerQuietThroughTheWindowConvergedAtItsLastChange) {
  const Convergence c = judge_convergence({.tune_steps = 200,
                                           .window_steps = 10,
                                           .changes_at_end = 14,
                                           .last_change_step = 196,
                                           .changes_after_window = 14});
  EXPECT_TRUE(c.converged);
  EXPECT_EQ(c.summary, "steps to converge 196 (14 configurations applied)");
}

// A tuner that applied nothing never measured a configuration: it did not converge, even though
// nothing changed during the window.
TEST(AutotuneConvergence, ATunerThatAppliedNothingDidNotConverge) {
  const Convergence c = judge_convergence({.tune_steps = 200,
                                           .window_steps = 10,
                                           .changes_at_end = 0,
                                           .last_change_step = 0,
                                           .changes_after_window = 0});
  EXPECT_FALSE(c.converged);
  EXPECT_EQ(c.summary,
            "did not converge within 200 steps: the tuner applied no configuration in them or "
            "the 10 after; raise --tune-steps");
  // Its first change during the window: still searching.
  EXPECT_FALSE(
      judge_convergence(
          {.tune_steps = 200, .window_steps = 10, .changes_at_end = 0, .changes_after_window = 1})
          .converged);
}

}  // namespace
}  // namespace kolo::bench
