// CUDA tensors on the CPU backends: staged through pinned host memory.
//
// Until a GPU backend exists, a collective on CUDA tensors runs on the CPU backend: the
// executor copies each device tensor (after its ready event) into a pinned host buffer, the
// backend works on the host copy, and the result is copied back to the device before the
// handle completes. Pinned (page-locked) memory makes the copies DMA transfers at full PCIe
// speed; the buffers are kept and reused, since cudaHostAlloc costs far more than a copy.
//
// Two implementations, chosen by CMake: cuda_staging.cc (KOLO_HAVE_CUDA) and
// no_cuda_staging.cc, where CUDA tensors are refused at submission and the staging methods
// return Unsupported.
//
// Not thread-safe: a CudaStaging belongs to one runtime's background thread (callers never
// drive a runtime that stages: Note [Waiter drives] in runtime.cc).
#pragma once

#include <array>
#include <cstddef>
#include <map>
#include <string>

#include "kolo/status.h"
#include "kolo/tensor.h"

namespace kolo::coord {

// Whether this build of Kolo was compiled with CUDA support.
bool cuda_built();
// CUDA devices visible to this process: 0 without CUDA support, without a driver or GPU.
int cuda_device_count();

// Checks at submission that a tensor's device can be staged. OK for CPU tensors. For a CUDA
// tensor: Unsupported in a build without CUDA ("tensor 'x' is on cuda:0 but this Kolo build
// has no CUDA support"), InvalidArgument when the ordinal is not a visible device.
// `what` names the operation and argument, e.g. "allreduce 'x': input".
Status check_device(const std::string& what, const std::string& name, const Device& device);

class CudaStaging {
 public:
  // Which pinned buffer: a fused batch, or one operation's input and output.
  enum class Slot { kFusion, kInput, kOutput };

  CudaStaging() = default;
  CudaStaging(const CudaStaging&) = delete;
  CudaStaging& operator=(const CudaStaging&) = delete;
  ~CudaStaging();  // frees the pinned buffers and copy streams

  // A pinned host buffer of at least `bytes` for `slot`. It stays valid until the next call
  // for the same slot (buffers grow and are never shrunk). Errors: the CUDA error message.
  Result<void*> host_buffer(Slot slot, size_t bytes);

  // Queues a copy of `bytes` from the CUDA tensor `src` into host memory `dst`, ordered after
  // src.ready_event on the device's copy stream; without one, after the work queued so far on
  // the legacy default stream (the copy streams are non-blocking, so that staging does not
  // hold up compute there). `name` is for error messages.
  Status copy_to_host(void* dst, const TensorView& src, size_t bytes, const std::string& name);
  // Queues a copy of `bytes` from host `src` into the CUDA tensor `dst`, ordered the same way
  // after dst.ready_event (an output may still be in use by its producer's stream).
  Status copy_to_device(const TensorView& dst, const void* src, size_t bytes,
                        const std::string& name);
  // Blocks until every queued copy has finished. The first copy error is returned here if
  // it was not already returned when queued.
  Status synchronize();

 private:
  struct Buffer {
    void* data = nullptr;
    size_t capacity = 0;
  };
  struct Stream {
    void* stream = nullptr;  // cudaStream_t, non-blocking
    void* mark = nullptr;    // cudaEvent_t recorded on the legacy default stream
  };
  // The copy stream of a device (created on first use), ordered after `ready_event` (a
  // cudaEvent_t), or after the legacy default stream when it is null.
  Result<void*> stream_after(int device, void* ready_event, const std::string& what);

  std::array<Buffer, 3> buffers_;
  std::map<int, Stream> streams_;  // device ordinal -> its copy stream
};

}  // namespace kolo::coord
