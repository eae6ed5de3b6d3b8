// Learning-rate schedules: pure functions of the optimizer step, so that every rank computes the
// same rate without communication and a resumed job (step restored from a checkpoint) continues
// exactly where it stopped.
//
// A schedule maps a 0-based step to a multiplier-free learning rate. Schedules compose:
// WarmupLr(steps, inner) ramps linearly into any other schedule, e.g. warm-up then cosine:
//   auto s = std::make_shared<WarmupLr>(500, std::make_shared<CosineLr>(0.4, 10000, 0.0));
//   opt.set_lr(s->lr(step));
//
// Errors: constructors throw kolo::Error(InvalidArgument) naming the argument, e.g.
// "CosineLr: total_steps must be > 0, got 0". lr(step) throws for step < 0.
// Thread-safety: schedules are immutable after construction; lr() may be called concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace kolo::fw {

class LrSchedule {
 public:
  virtual ~LrSchedule() = default;
  // The learning rate to use for optimizer step `step` (0 for the first step).
  virtual double lr(int64_t step) const = 0;
};

// Always base_lr.
class ConstantLr : public LrSchedule {
 public:
  explicit ConstantLr(double base_lr);
  double lr(int64_t step) const override;

 private:
  double base_lr_;
};

// base_lr * gamma^(number of milestones <= step). With a single step_size instead of milestones
// the milestones are step_size, 2*step_size, ...
class StepLr : public LrSchedule {
 public:
  // Decays every `step_size` steps.
  StepLr(double base_lr, int64_t step_size, double gamma);
  // Decays at each of the strictly increasing `milestones`.
  StepLr(double base_lr, std::vector<int64_t> milestones, double gamma);
  double lr(int64_t step) const override;

 private:
  double base_lr_;
  int64_t step_size_ = 0;  // > 0 in the periodic form, 0 in the milestone form
  std::vector<int64_t> milestones_;
  double gamma_;
};

// Half-cosine from base_lr at step 0 down to min_lr at total_steps; min_lr afterwards:
//   lr = min_lr + (base_lr - min_lr) * (1 + cos(pi * step / total_steps)) / 2.
class CosineLr : public LrSchedule {
 public:
  CosineLr(double base_lr, int64_t total_steps, double min_lr = 0.0);
  double lr(int64_t step) const override;

 private:
  double base_lr_;
  int64_t total_steps_;
  double min_lr_;
};

// Linear warm-up (Goyal et al., "Accurate, Large Minibatch SGD"): for step < warmup_steps the
// rate grows linearly from start_factor * target to the target, where target is inner->lr(
// warmup_steps); from warmup_steps on it is inner->lr(step - warmup_steps) when `shift_inner`,
// else inner->lr(step). Shifting (the default) means the inner schedule starts after warm-up, so
// a cosine decay still spans its full length.
class WarmupLr : public LrSchedule {
 public:
  WarmupLr(int64_t warmup_steps, std::shared_ptr<const LrSchedule> inner, double start_factor = 0.0,
           bool shift_inner = true);
  double lr(int64_t step) const override;

 private:
  int64_t warmup_steps_;
  std::shared_ptr<const LrSchedule> inner_;
  double start_factor_;
  bool shift_inner_;
};

}  // namespace kolo::fw
