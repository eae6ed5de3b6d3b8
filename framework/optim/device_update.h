// Dispatch of the optimizer updates for parameters that are not on the CPU. In a CUDA build
// (KOLO_HAVE_CUDA) CUDA tensors go to the fused kernels of update_kernels_cuda.h; otherwise no
// non-CPU tensor can exist and these throw kolo::Error(Unsupported) naming the device.
// Contract: all tensors float32, same shape and device (checked by Optimizer::step).
#pragma once

#include "framework/optim/update_kernels.h"
#include "framework/tensor.h"

namespace kolo::fw {

void update_on_device(Tensor& param, const Tensor& grad, Tensor& buf, const kernels::SgdArgs& a);
void update_on_device(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                      const kernels::AdamArgs& a);

}  // namespace kolo::fw
