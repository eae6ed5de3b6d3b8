// CUDA twins of the fused loops in update_kernels.h: same arguments, same arithmetic, one pass
// over memory. Pointers are device pointers on CUDA device `device`; the kernels run on the
// legacy default stream, like the rest of the framework's CUDA work (framework/kernels/
// cuda_kernels.h), so they are ordered after the backward pass that produced the gradients.
// Only compiled with KOLO_HAVE_CUDA. A launch failure throws kolo::Error(IoError).
#pragma once

#include <cstdint>

#include "framework/optim/update_kernels.h"

namespace kolo::fw::optim_cuda {

void sgd_update(int device, float* param, const float* grad, float* buf, int64_t n,
                const kernels::SgdArgs& a);
void adam_update(int device, float* param, const float* grad, float* m, float* v, int64_t n,
                 const kernels::AdamArgs& a);

}  // namespace kolo::fw::optim_cuda
