#include "backends/nccl/nccl_errors.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

namespace kolo::nccl {

Status nccl_status(int result, const std::string& what, const std::string& detail) {
  const auto r = static_cast<ncclResult_t>(result);
  if (r == ncclSuccess) return Status::Ok();
  const char* name = "ncclUnknownError";
  StatusCode code = StatusCode::kInternal;
  switch (r) {
    case ncclUnhandledCudaError:
      name = "ncclUnhandledCudaError";
      break;
    case ncclSystemError:
      name = "ncclSystemError";
      code = StatusCode::kIoError;
      break;
    case ncclInternalError:
      name = "ncclInternalError";
      break;
    case ncclInvalidArgument:
      name = "ncclInvalidArgument";
      code = StatusCode::kInvalidArgument;
      break;
    case ncclInvalidUsage:
      name = "ncclInvalidUsage";
      code = StatusCode::kInvalidArgument;
      break;
    case ncclRemoteError:
      name = "ncclRemoteError";
      code = StatusCode::kPeerFailure;
      break;
    case ncclInProgress:
      name = "ncclInProgress";
      break;
    default:
      break;
  }
  std::string msg = what + ": NCCL error " + name + ": " + ncclGetErrorString(r);
  if (!detail.empty()) msg += " (" + detail + ")";
  return Status(code, std::move(msg));
}

Status cuda_status(int err, const std::string& what) {
  const auto e = static_cast<cudaError_t>(err);
  if (e == cudaSuccess) return Status::Ok();
  StatusCode code = StatusCode::kInternal;
  switch (e) {
    case cudaErrorInvalidValue:
    case cudaErrorInvalidResourceHandle:
    case cudaErrorInvalidDevice:
      code = StatusCode::kInvalidArgument;
      break;
    default:
      break;
  }
  return Status(code, what + ": CUDA error " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
}

Status pending_cuda_status(int err, const std::string& what) {
  const auto e = static_cast<cudaError_t>(err);
  return Status::Internal(what + ": not launched: CUDA error " + cudaGetErrorName(e) + ": " +
                          cudaGetErrorString(e) +
                          " was already pending on this thread (an earlier call's, left "
                          "unchecked; it stays pending for that call's owner)");
}

int nccl_dtype(DataType dtype) {
  switch (dtype) {
    case DataType::kUInt8:
      return ncclUint8;
    case DataType::kInt8:
      return ncclInt8;
    case DataType::kInt16:
      return ncclFloat16;  // data movement only: the same 2 bytes (int16_reduction_unsupported)
    case DataType::kInt32:
      return ncclInt32;
    case DataType::kInt64:
      return ncclInt64;
    case DataType::kFloat16:
      return ncclFloat16;
    case DataType::kBFloat16:
      return ncclBfloat16;
    case DataType::kFloat32:
      return ncclFloat32;
    case DataType::kFloat64:
      return ncclFloat64;
  }
  return ncclFloat32;  // unreachable: Backend validated the dtype
}

int nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kAverage:
      return ncclSum;  // then divided by the ranks, as the host does (nccl_errors.h)
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kProduct:
      return ncclProd;
  }
  return ncclSum;  // unreachable: Backend validated the op
}

Status int16_reduction_unsupported(DataType dtype, const std::string& what) {
  if (dtype != DataType::kInt16) return Status::Ok();
  return Status::Unsupported(what +
                             ": NCCL cannot reduce int16 (it has no 16-bit integer type); "
                             "reduce a CUDA int16 tensor as int32, or move it to the CPU");
}

ScaleType kernel_type(DataType dtype) {
  switch (dtype) {
    case DataType::kUInt8:
      return ScaleType::kUInt8;
    case DataType::kInt8:
      return ScaleType::kInt8;
    case DataType::kInt16:
      break;  // not reduced on the GPU (int16_reduction_unsupported)
    case DataType::kInt32:
      return ScaleType::kInt32;
    case DataType::kInt64:
      return ScaleType::kInt64;
    case DataType::kFloat16:
      return ScaleType::kFloat16;
    case DataType::kBFloat16:
      return ScaleType::kBFloat16;
    case DataType::kFloat32:
      return ScaleType::kFloat32;
    case DataType::kFloat64:
      return ScaleType::kFloat64;
  }
  return ScaleType::kFloat32;  // unreachable: Backend validated the dtype
}

}  // namespace kolo::nccl
