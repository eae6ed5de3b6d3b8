#include "framework/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

#include "kolo/status.h"

namespace kolo::fw {
namespace {

[[noreturn]] void invalid(const std::string& msg) { throw Error(Status::InvalidArgument(msg)); }

void check_lr(const char* cls, const char* arg, double v) {
  if (!std::isfinite(v) || v < 0) {
    invalid(std::string(cls) + ": " + arg + " must be finite and >= 0, got " + std::to_string(v));
  }
}

void check_step(const char* cls, int64_t step) {
  if (step < 0) invalid(std::string(cls) + ": step must be >= 0, got " + std::to_string(step));
}

}  // namespace

ConstantLr::ConstantLr(double base_lr) : base_lr_(base_lr) {
  check_lr("ConstantLr", "base_lr", base_lr);
}

double ConstantLr::lr(int64_t step) const {
  check_step("ConstantLr", step);
  return base_lr_;
}

StepLr::StepLr(double base_lr, int64_t step_size, double gamma)
    : base_lr_(base_lr), step_size_(step_size), gamma_(gamma) {
  check_lr("StepLr", "base_lr", base_lr);
  check_lr("StepLr", "gamma", gamma);
  if (step_size <= 0) invalid("StepLr: step_size must be > 0, got " + std::to_string(step_size));
}

StepLr::StepLr(double base_lr, std::vector<int64_t> milestones, double gamma)
    : base_lr_(base_lr), milestones_(std::move(milestones)), gamma_(gamma) {
  check_lr("StepLr", "base_lr", base_lr);
  check_lr("StepLr", "gamma", gamma);
  for (size_t i = 0; i < milestones_.size(); ++i) {
    if (milestones_[i] <= 0 || (i > 0 && milestones_[i] <= milestones_[i - 1])) {
      invalid("StepLr: milestones must be positive and strictly increasing, got " +
              std::to_string(milestones_[i]) + " at index " + std::to_string(i));
    }
  }
}

double StepLr::lr(int64_t step) const {
  check_step("StepLr", step);
  int64_t decays = 0;
  if (step_size_ > 0) {
    decays = step / step_size_;
  } else {
    decays = std::upper_bound(milestones_.begin(), milestones_.end(), step) - milestones_.begin();
  }
  return base_lr_ * std::pow(gamma_, static_cast<double>(decays));
}

CosineLr::CosineLr(double base_lr, int64_t total_steps, double min_lr)
    : base_lr_(base_lr), total_steps_(total_steps), min_lr_(min_lr) {
  check_lr("CosineLr", "base_lr", base_lr);
  check_lr("CosineLr", "min_lr", min_lr);
  if (total_steps <= 0) {
    invalid("CosineLr: total_steps must be > 0, got " + std::to_string(total_steps));
  }
}

double CosineLr::lr(int64_t step) const {
  check_step("CosineLr", step);
  if (step >= total_steps_) return min_lr_;
  const double t = static_cast<double>(step) / static_cast<double>(total_steps_);
  return min_lr_ + (base_lr_ - min_lr_) * 0.5 * (1.0 + std::cos(std::numbers::pi * t));
}

WarmupLr::WarmupLr(int64_t warmup_steps, std::shared_ptr<const LrSchedule> inner,
                   double start_factor, bool shift_inner)
    : warmup_steps_(warmup_steps),
      inner_(std::move(inner)),
      start_factor_(start_factor),
      shift_inner_(shift_inner) {
  if (warmup_steps < 0) {
    invalid("WarmupLr: warmup_steps must be >= 0, got " + std::to_string(warmup_steps));
  }
  if (!inner_) invalid("WarmupLr: inner schedule must not be null");
  if (!std::isfinite(start_factor) || start_factor < 0 || start_factor > 1) {
    invalid("WarmupLr: start_factor must be in [0, 1], got " + std::to_string(start_factor));
  }
}

double WarmupLr::lr(int64_t step) const {
  check_step("WarmupLr", step);
  if (step >= warmup_steps_) return inner_->lr(shift_inner_ ? step - warmup_steps_ : step);
  // The ramp ends at the rate the inner schedule has when warm-up hands over to it.
  const double target = inner_->lr(shift_inner_ ? 0 : warmup_steps_);
  const double frac = static_cast<double>(step) / static_cast<double>(warmup_steps_);
  return target * (start_factor_ + (1.0 - start_factor_) * frac);
}

}  // namespace kolo::fw
