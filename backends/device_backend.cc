#include "backends/device_backend.h"

#include <string>

namespace kolo {

Result<int> gpu_of_local_rank(int local_rank, int local_size, int visible_gpus) {
  if (visible_gpus <= 0)
    return Status::Unsupported(
        "this process sees no CUDA device (CUDA_VISIBLE_DEVICES, driver); NCCL needs one GPU "
        "per rank");
  if (visible_gpus == 1) return 0;
  if (local_size > visible_gpus)
    return Status::InvalidArgument(
        std::to_string(local_size) + " ranks run on this host but it has " +
        std::to_string(visible_gpus) + " visible GPU(s); NCCL needs one GPU per rank");
  return local_rank;
}

}  // namespace kolo
