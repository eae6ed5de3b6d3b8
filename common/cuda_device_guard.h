// CudaDeviceGuard: makes a CUDA device current for a scope and restores the thread's previous
// one, for code that runs on a thread Kolo does not own (the caller's, in a blocking collective,
// a backend's connect or destructor, the framework's record_event): cudaSetDevice is per thread,
// and a library that leaves it changed makes the caller's next allocation or launch land on the
// wrong GPU. Kolo's own threads (the background loop, the nccl watchdog) set their device once
// and need no guard.
//
// Header-only; include it only from code built with CUDA (it needs cuda_runtime_api.h).
// Errors: status() is cudaSetDevice's result (an invalid ordinal, no driver); the caller decides
// what to do with it. A thread with no device set yet (cudaGetDevice fails) gets nothing
// restored. Not copyable; one thread.
#pragma once

#include <cuda_runtime_api.h>

namespace kolo {

class CudaDeviceGuard {
 public:
  explicit CudaDeviceGuard(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) {
      (void)cudaGetLastError();  // not sticky: clear it
      previous_ = -1;
    }
    status_ = cudaSetDevice(device);
    if (previous_ == device) previous_ = -1;  // nothing to restore
  }
  ~CudaDeviceGuard() {
    if (previous_ >= 0) (void)cudaSetDevice(previous_);
  }
  CudaDeviceGuard(const CudaDeviceGuard&) = delete;
  CudaDeviceGuard& operator=(const CudaDeviceGuard&) = delete;

  cudaError_t status() const { return status_; }

 private:
  int previous_ = -1;
  cudaError_t status_ = cudaSuccess;
};

}  // namespace kolo
