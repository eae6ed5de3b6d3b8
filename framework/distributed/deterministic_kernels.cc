#include "framework/distributed/deterministic_kernels.h"

#include "framework/kernels/cpu_kernels.h"
#include "kolo/kolo.h"
#ifdef KOLO_HAVE_CUDA
#include "framework/kernels/cuda_kernels.h"
#endif

namespace kolo::fw {

bool configure_deterministic_kernels() {
  if (!kolo::deterministic()) return false;
  kernels::cpu::set_blas_threads(kDeterministicBlasThreads);
#ifdef KOLO_HAVE_CUDA
  kernels::cuda::set_deterministic(true);
#endif
  return true;
}

}  // namespace kolo::fw
