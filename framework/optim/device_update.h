// The optimizer updates on tensors, dispatched by device: CPU tensors go to update_kernels.h,
// CUDA tensors (in a CUDA build, KOLO_HAVE_CUDA) to the fused kernels of update_kernels_cuda.h;
// any other device throws kolo::Error(Unsupported) naming it.
// Contract: all tensors float32, same shape and device (checked by Optimizer::step).
#pragma once

#include "framework/optim/update_kernels.h"
#include "framework/tensor.h"

namespace kolo::fw {

void apply_update(Tensor& param, const Tensor& grad, Tensor& buf, const kernels::SgdArgs& a);
void apply_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                  const kernels::AdamArgs& a);

}  // namespace kolo::fw
