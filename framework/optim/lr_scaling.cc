#include "framework/optim/lr_scaling.h"

#include <cmath>
#include <string>

#include "kolo/status.h"

namespace kolo::fw {
namespace {

void check(const char* fn, double base_lr, int64_t workers) {
  if (workers < 1) {
    throw Error(Status::InvalidArgument(std::string(fn) + ": workers must be >= 1, got " +
                                        std::to_string(workers)));
  }
  if (!std::isfinite(base_lr) || base_lr < 0) {
    throw Error(Status::InvalidArgument(
        std::string(fn) + ": base_lr must be finite and >= 0, got " + std::to_string(base_lr)));
  }
}

}  // namespace

double scale_lr_linear(double base_lr, int64_t workers) {
  check("scale_lr_linear", base_lr, workers);
  return base_lr * static_cast<double>(workers);
}

double scale_lr_sqrt(double base_lr, int64_t workers) {
  check("scale_lr_sqrt", base_lr, workers);
  return base_lr * std::sqrt(static_cast<double>(workers));
}

double scale_lr(double base_lr, int64_t workers, LrScaling rule) {
  switch (rule) {
    case LrScaling::kNone:
      check("scale_lr", base_lr, workers);
      return base_lr;
    case LrScaling::kLinear:
      return scale_lr_linear(base_lr, workers);
    case LrScaling::kSqrt:
      return scale_lr_sqrt(base_lr, workers);
  }
  throw Error(
      Status::InvalidArgument("scale_lr: unknown rule " + std::to_string(static_cast<int>(rule))));
}

}  // namespace kolo::fw
