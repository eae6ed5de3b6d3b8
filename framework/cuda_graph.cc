#include "framework/cuda_graph.h"

#include <string>

#include "kolo/status.h"
#ifdef KOLO_HAVE_CUDA
#include <cuda_runtime.h>

#include "framework/kernels/cuda_allocator.h"
#include "framework/kernels/cuda_kernels.h"
#endif

namespace kolo::fw {

#ifdef KOLO_HAVE_CUDA
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw Error(Status::IoError(std::string("CudaGraph: ") + what + ": " + cudaGetErrorString(e)));
}

// Ends the open capture on `stream` after `body` threw: the partial graph is dropped and the
// sticky capture error (if any) cleared, so the caller can go on eagerly.
void abandon_capture(cudaStream_t stream) noexcept {
  cudaGraph_t partial = nullptr;
  cudaStreamEndCapture(stream, &partial);
  if (partial) cudaGraphDestroy(partial);
  cudaGetLastError();
}

}  // namespace

void CudaGraph::capture(Device device, const std::function<void()>& body) {
  if (!device.is_cuda())
    throw Error(
        Status::Unsupported("CudaGraph: capture needs a CUDA device, got " + device.to_string()));
  if (exec_ || stream_)
    throw Error(Status::PreconditionFailed("CudaGraph: already captured (one capture each)"));
  device_ = device;
  kernels::cuda::set_device(device.index);
  cudaStream_t stream = nullptr;
  // Blocking (not cudaStreamNonBlocking): ordered with the legacy stream's eager work.
  check(cudaStreamCreate(&stream), "cudaStreamCreate");
  stream_ = stream;
  try {
    pool_ = cuda_alloc::begin_graph_pool(device.index);
  } catch (...) {
    reset();  // another capture is open: this graph stays uncaptured and may try again
    throw;
  }
  cudaGraph_t graph = nullptr;
  try {
    kernels::cuda::StreamScope scope(stream);
    // Relaxed: the caching allocator may cudaMalloc a new block into the graph's pool.
    check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed), "cudaStreamBeginCapture");
    try {
      body();
    } catch (...) {
      abandon_capture(stream);
      throw;
    }
    const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
    if (ended != cudaSuccess) cudaGetLastError();  // e.g. an invalidated capture: not sticky
    check(ended, "cudaStreamEndCapture");
  } catch (...) {
    cuda_alloc::end_graph_pool();
    reset();
    throw;
  }
  cuda_alloc::end_graph_pool();
  graph_ = graph;
  cudaGraphExec_t exec = nullptr;
  const cudaError_t e = cudaGraphInstantiateWithFlags(&exec, graph, 0);
  if (e != cudaSuccess) reset();
  check(e, "cudaGraphInstantiateWithFlags");
  exec_ = exec;
}

void CudaGraph::replay() {
  if (!exec_)
    throw Error(Status::PreconditionFailed("CudaGraph: replay() before a successful capture()"));
  kernels::cuda::set_device(device_.index);
  check(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), static_cast<cudaStream_t>(stream_)),
        "cudaGraphLaunch");
}

size_t CudaGraph::pool_bytes() const { return pool_ ? cuda_alloc::graph_pool_bytes(pool_) : 0; }

// Waits for the last replay (its blocks go back to the general cache next), then frees.
void CudaGraph::reset() noexcept {
  if (stream_) {
    cudaSetDevice(device_.index);
    cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
  }
  if (exec_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
  if (graph_) cudaGraphDestroy(static_cast<cudaGraph_t>(graph_));
  if (stream_) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
  if (pool_) cuda_alloc::release_graph_pool(pool_);
  exec_ = graph_ = stream_ = nullptr;
  pool_ = 0;
}

#else  // no CUDA in this build

void CudaGraph::capture(Device device, const std::function<void()>&) {
  throw Error(Status::Unsupported("CudaGraph: capture on " + device.to_string() +
                                  " needs a CUDA device and a build with KOLO_HAVE_CUDA"));
}
void CudaGraph::replay() {
  throw Error(Status::PreconditionFailed("CudaGraph: replay() before a successful capture()"));
}
size_t CudaGraph::pool_bytes() const { return 0; }
void CudaGraph::reset() noexcept {}

#endif

CudaGraph::~CudaGraph() { reset(); }

}  // namespace kolo::fw
