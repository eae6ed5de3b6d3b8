// CudaDeviceGuard: makes a CUDA device current for a scope and puts the thread's previous one
// back, for code that runs on a thread Kolo does not own (the caller's, in a blocking
// collective, a backend's connect or destructor, the framework's record_event): cudaSetDevice
// is per thread, and a library that leaves it changed makes the caller's next allocation or
// launch land on the wrong GPU. Kolo's own threads (the background loop, the nccl watchdog)
// set their device once and need no guard.
//
// Restored only when there is something to restore. A thread that never chose a device still
// gets cudaSuccess and device 0 from cudaGetDevice, and since CUDA 12 cudaSetDevice creates the
// device's primary context at once (300-500 MB of GPU memory; in EXCLUSIVE_PROCESS mode it
// takes the GPU from the rank that owns it). So the previous device is set back only when its
// primary context is active (cuDevicePrimaryCtxGetState, reached through the runtime's driver
// entry point: nothing more is linked), as PyTorch's c10::cuda::MaybeSetDevice does; a thread
// that had no device of its own is left on `device`. Before CUDA 12 cudaSetDevice is lazy and
// the previous device is always restored; so it is when the driver cannot be asked.
//
// Header-only; include it only from code built with CUDA (it needs cuda_runtime_api.h).
// Errors: status() is cudaSetDevice's result (an invalid ordinal, no driver); the caller decides
// what to do with it, and it is not left pending as the thread's last error. The restore's own
// error is dropped (a destructor has nobody to tell, and the device was usable a moment ago). Not
// copyable; one thread.
#pragma once

#include <cuda_runtime_api.h>

#if CUDART_VERSION >= 12000
#include <cudaTypedefs.h>
#endif

namespace kolo {

// Whether `device`'s primary context is active in this process: true when it is, and when
// the driver cannot be asked (restoring is then the safe side); before CUDA 12, always true.
inline bool cuda_primary_context_active(int device) {
#if CUDART_VERSION >= 12000
  struct Driver {
    PFN_cuDeviceGet_v2000 get = nullptr;
    PFN_cuDevicePrimaryCtxGetState_v7000 state = nullptr;
  };
  static const Driver driver = [] {
    // `version`: the ABI of the typedef the pointer is cast to.
    auto query = [](const char* symbol, unsigned version) -> void* {
      void* fn = nullptr;
      cudaDriverEntryPointQueryResult found{};
#if CUDART_VERSION >= 12050  // cudaGetDriverEntryPoint is deprecated since 12.5
      cudaError_t err =
          cudaGetDriverEntryPointByVersion(symbol, &fn, version, cudaEnableDefault, &found);
#else
      (void)version;
      cudaError_t err = cudaGetDriverEntryPoint(symbol, &fn, cudaEnableDefault, &found);
#endif
      if (err != cudaSuccess) (void)cudaGetLastError();  // not the caller's error
      return err == cudaSuccess && found == cudaDriverEntryPointSuccess ? fn : nullptr;
    };
    Driver d;
    d.get = reinterpret_cast<PFN_cuDeviceGet_v2000>(query("cuDeviceGet", 2000));
    d.state = reinterpret_cast<PFN_cuDevicePrimaryCtxGetState_v7000>(
        query("cuDevicePrimaryCtxGetState", 7000));
    return d;
  }();
  if (!driver.get || !driver.state) return true;
  CUdevice dev = 0;
  unsigned int flags = 0;
  int active = 0;
  if (driver.get(&dev, device) != CUDA_SUCCESS) return true;
  if (driver.state(dev, &flags, &active) != CUDA_SUCCESS) return true;
  return active != 0;
#else
  (void)device;
  return true;
#endif
}

class CudaDeviceGuard {
 public:
  explicit CudaDeviceGuard(int device) {
    int previous = -1;
    if (cudaGetDevice(&previous) != cudaSuccess) {
      (void)cudaGetLastError();  // not sticky: clear it
      previous = -1;
    }
    // Asked before cudaSetDevice: `device`'s context is not the previous one's.
    if (previous >= 0 && previous != device && cuda_primary_context_active(previous))
      previous_ = previous;
    status_ = cudaSetDevice(device);
    if (status_ != cudaSuccess) (void)cudaGetLastError();  // status() holds it
  }
  ~CudaDeviceGuard() {
    if (previous_ >= 0 && cudaSetDevice(previous_) != cudaSuccess) (void)cudaGetLastError();
  }
  CudaDeviceGuard(const CudaDeviceGuard&) = delete;
  CudaDeviceGuard& operator=(const CudaDeviceGuard&) = delete;

  cudaError_t status() const { return status_; }

 private:
  int previous_ = -1;  // the device to set back; -1: nothing to restore
  cudaError_t status_ = cudaSuccess;
};

}  // namespace kolo
