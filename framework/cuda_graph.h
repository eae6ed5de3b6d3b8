// CudaGraph: one sequence of the training stack's CUDA work, captured once and replayed as a
// single launch (issue 32: at batch 64 a step is hundreds of small kernels, and launching them
// one by one costs more than running them).
//
//   fw::CudaGraph graph;
//   graph.capture(device, [&] { loss = step(static_x, static_y); });  // records, runs nothing
//   for (...) { static_x.copy_(next_x); graph.replay(); read(loss); }
//
// Contract of the captured body (what a capture needs from this framework):
// - Only device work on `device`: no host reads (Tensor::item, to(cpu), sum(), the eager
//   cross_entropy's loss) and no copies from the host; these throw kolo::Error(kPreconditionFailed)
//   during a capture, and capture() rethrows after closing the capture.
//   fw::cross_entropy_capturable is the loss to use.
// - The same shapes, addresses and scalars every replay: a replay repeats the kernels with the
//   arguments they had (a learning rate that changes per step belongs outside the graph). Inputs
//   go in through tensors made before the capture and refilled in place (copy_) before each
//   replay; outputs are tensors the body made and the caller keeps, valid until the next replay.
// - Warmed up: run the same step eagerly first, so that gradients exist (backward then adds
//   into them in place), the cuDNN/cuBLAS handles exist and the convolution algorithms are
//   cached; their first use allocates and queries the device, which a capture must not.
// - No Kolo collectives (they run on Kolo's threads, outside the stream).
// Memory: the capture's blocks come from a pool of the caching allocator kept for this graph
// (cuda_allocator.h, graph-private pools) until the CudaGraph is destroyed.
// The work runs on a stream of the graph's own, a blocking one, so eager work on the legacy
// default stream before and after a replay is ordered with it as before.
//
// Errors: capture() throws kolo::Error(kUnsupported) for a CPU device or a build without CUDA,
// kPreconditionFailed when already captured (or another capture is open), kIoError naming the
// CUDA call that failed. Thread-safety: one thread uses a CudaGraph; one capture at a time in
// the process, and other threads must not allocate on that device while it is open.
#pragma once

#include <cstdint>
#include <functional>

#include "framework/tensor.h"

namespace kolo::fw {

class CudaGraph {
 public:
  CudaGraph() = default;
  ~CudaGraph();  // waits for the last replay, then frees the graph and hands its pool back
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  // Runs `body` with the framework's work on `device` captured instead of executed.
  void capture(Device device, const std::function<void()>& body);
  // Launches the captured work (asynchronous, like an eager kernel). PreconditionFailed before
  // capture().
  void replay();
  bool captured() const { return exec_ != nullptr; }
  // Bytes of the graph's private pool (for tests and the memory report).
  size_t pool_bytes() const;

 private:
  void reset() noexcept;

  Device device_ = Device::cpu();
  void* stream_ = nullptr;  // cudaStream_t
  void* graph_ = nullptr;   // cudaGraph_t
  void* exec_ = nullptr;    // cudaGraphExec_t
  uint64_t pool_ = 0;
};

}  // namespace kolo::fw
