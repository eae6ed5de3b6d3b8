// Private to framework/: runs the same kernel call on the CPU or on a tensor's CUDA device.
// KOLO_FW_CALL(device, fn(args...)) calls kernels::cpu::fn or kernels::cuda::fn (after selecting
// the device); without KOLO_HAVE_CUDA a CUDA device throws kolo::Error(kUnsupported).
#pragma once

#include <string>

#include "framework/kernels/cpu_kernels.h"
#include "kolo/status.h"
#ifdef KOLO_HAVE_CUDA
#include "framework/kernels/cuda_kernels.h"
#endif

namespace kolo::fw::kernels {
[[noreturn]] inline void throw_no_cuda(const char* what) {
  throw Error(
      Status::Unsupported(std::string(what) + ": CUDA tensors need a build with KOLO_HAVE_CUDA"));
}
}  // namespace kolo::fw::kernels

#ifdef KOLO_HAVE_CUDA
#define KOLO_FW_CALL(dev, call)           \
  (((dev).is_cpu())                       \
       ? (::kolo::fw::kernels::cpu::call) \
       : (::kolo::fw::kernels::cuda::set_device((dev).index), ::kolo::fw::kernels::cuda::call))
#else
#define KOLO_FW_CALL(dev, call)                        \
  (((dev).is_cpu()) ? (::kolo::fw::kernels::cpu::call) \
                    : (::kolo::fw::kernels::throw_no_cuda(#call), ::kolo::fw::kernels::cpu::call))
#endif
