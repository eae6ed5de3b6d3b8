#include "framework/optim/device_update.h"

#include <string>

#ifdef KOLO_HAVE_CUDA
#include "framework/optim/update_kernels_cuda.h"
#endif

namespace kolo::fw {
namespace {

float* f32(const Tensor& t) { return static_cast<float*>(t.raw_data()); }

[[noreturn]] void unsupported(const Tensor& param) {
  throw Error(Status::Unsupported("optimizer: no update kernel for parameters on " +
                                  param.device().to_string() + " in this build"));
}

}  // namespace

void apply_update(Tensor& param, const Tensor& grad, Tensor& buf, const kernels::SgdArgs& a) {
  if (param.device().is_cpu()) {
    kernels::sgd_update(f32(param), f32(grad), f32(buf), param.numel(), a);
    return;
  }
#ifdef KOLO_HAVE_CUDA
  if (param.device().is_cuda()) {
    optim_cuda::sgd_update(param.device().index, f32(param), f32(grad), f32(buf), param.numel(), a);
    return;
  }
#endif
  unsupported(param);
}

void apply_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                  const kernels::AdamArgs& a) {
  if (param.device().is_cpu()) {
    kernels::adam_update(f32(param), f32(grad), f32(m), f32(v), param.numel(), a);
    return;
  }
#ifdef KOLO_HAVE_CUDA
  if (param.device().is_cuda()) {
    optim_cuda::adam_update(param.device().index, f32(param), f32(grad), f32(m), f32(v),
                            param.numel(), a);
    return;
  }
#endif
  unsupported(param);
}

}  // namespace kolo::fw
