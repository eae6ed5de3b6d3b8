// CudaStaging in builds without CUDA: CUDA tensors are refused at submission, so the staging
// methods are never reached; they return Unsupported all the same.
#include "coordinator/cuda_staging.h"

namespace kolo::coord {

namespace {

Status no_cuda(const std::string& what) {
  return Status::Unsupported(what +
                             ": this Kolo build has no CUDA support "
                             "(configure with -DKOLO_WITH_CUDA=ON)");
}

}  // namespace

bool cuda_built() { return false; }

int cuda_device_count() { return 0; }

Status check_device(const std::string& what, const std::string& name, const Device& device) {
  if (device.is_cpu()) return Status::Ok();
  return Status::Unsupported(what + ": tensor '" + name + "' is on " + device.to_string() +
                             " but this Kolo build has no CUDA support (configure with "
                             "-DKOLO_WITH_CUDA=ON)");
}

CudaStaging::~CudaStaging() = default;

Result<void*> CudaStaging::host_buffer(Slot, size_t) { return no_cuda("pinned staging buffer"); }

Result<void*> CudaStaging::stream_after(int, void*, const std::string&) {
  return no_cuda("CUDA copy stream");
}

Status CudaStaging::copy_to_host(void*, const TensorView&, size_t, const std::string& name) {
  return no_cuda("staging tensor '" + name + "'");
}

Status CudaStaging::copy_to_device(const TensorView&, const void*, size_t,
                                   const std::string& name) {
  return no_cuda("staging tensor '" + name + "'");
}

Status CudaStaging::synchronize() { return Status::Ok(); }

}  // namespace kolo::coord
