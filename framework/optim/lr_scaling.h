// Scaling the learning rate with the number of data-parallel workers. With W workers each
// taking a local batch of b, the global batch is W*b, so the rate tuned for one worker must grow:
// - linear rule (Goyal et al. 2017, for SGD): lr * W. Pair it with a warm-up (WarmupLr) because
//   a large rate at step 0 diverges.
// - square-root rule (Krizhevsky 2014; common for Adam/LAMB): lr * sqrt(W), which keeps the
//   variance of the update constant.
// Elastic jobs apply the same rule with the current world's size after every re-form (the global
// batch is batch * size in each world): docs/elastic.md, "The training stack".
// Errors: throw kolo::Error(InvalidArgument) for workers < 1 or a negative/non-finite base_lr.
#pragma once

#include <cstdint>

namespace kolo::fw {

enum class LrScaling { kNone, kLinear, kSqrt };

double scale_lr_linear(double base_lr, int64_t workers);
double scale_lr_sqrt(double base_lr, int64_t workers);
double scale_lr(double base_lr, int64_t workers, LrScaling rule);

}  // namespace kolo::fw
