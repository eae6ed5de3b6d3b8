// The optimizer updates of update_kernels.h expressed with Tensor's in-place ops, which run on
// any device (CPU and CUDA). The optimizers use these for parameters that are not on the CPU;
// the tests run them on the CPU and compare with the fused loops, so both paths share one
// definition of the arithmetic. They take a few passes instead of one and allocate one
// temporary per call (from the device's caching allocator).
//
// Contract: all tensors float32, same shape and device (Tensor's ops throw otherwise).
#pragma once

#include "framework/optim/update_kernels.h"
#include "framework/tensor.h"

namespace kolo::fw {

void sgd_update_tensors(Tensor& param, const Tensor& grad, Tensor& buf,
                        const kernels::SgdArgs& a);
void adam_update_tensors(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                         const kernels::AdamArgs& a);

}  // namespace kolo::fw
