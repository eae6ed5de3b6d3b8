// The mapping of NCCL and CUDA results to Status, and of Kolo's types to NCCL's. No GPU needed.
#include "backends/nccl/nccl_errors.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <nccl.h>

namespace kolo::nccl {
namespace {

TEST(NcclErrorsTest, NcclResultsMapToCodesAndNameTheTensor) {
  EXPECT_TRUE(nccl_status(ncclSuccess, "allreduce 'w'").ok());
  const struct {
    ncclResult_t result;
    StatusCode code;
    const char* name;
  } cases[] = {
      {ncclUnhandledCudaError, StatusCode::kInternal, "ncclUnhandledCudaError"},
      {ncclSystemError, StatusCode::kIoError, "ncclSystemError"},
      {ncclInternalError, StatusCode::kInternal, "ncclInternalError"},
      {ncclInvalidArgument, StatusCode::kInvalidArgument, "ncclInvalidArgument"},
      {ncclInvalidUsage, StatusCode::kInvalidArgument, "ncclInvalidUsage"},
      {ncclRemoteError, StatusCode::kPeerFailure, "ncclRemoteError"},
      {ncclInProgress, StatusCode::kInternal, "ncclInProgress"},
  };
  for (const auto& c : cases) {
    Status st = nccl_status(c.result, "allreduce 'grad/w1'");
    EXPECT_EQ(st.code(), c.code) << c.name;
    EXPECT_EQ(st.message(), std::string("allreduce 'grad/w1': NCCL error ") + c.name + ": " +
                                ncclGetErrorString(c.result));
  }
  Status detailed = nccl_status(ncclRemoteError, "broadcast 'b'", "rank 3 closed the socket");
  EXPECT_EQ(detailed.code(), StatusCode::kPeerFailure);
  EXPECT_EQ(detailed.message().rfind(" (rank 3 closed the socket)"),
            detailed.message().size() - std::string(" (rank 3 closed the socket)").size());
}

TEST(NcclErrorsTest, CudaErrorsMapToCodesAndNameTheTensor) {
  EXPECT_TRUE(cuda_status(cudaSuccess, "x").ok());
  Status event = cuda_status(cudaErrorInvalidResourceHandle, "allreduce 'g': its ready event");
  EXPECT_EQ(event.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(event.message(), std::string("allreduce 'g': its ready event: CUDA error "
                                         "cudaErrorInvalidResourceHandle: ") +
                                 cudaGetErrorString(cudaErrorInvalidResourceHandle));
  for (cudaError_t e : {cudaErrorInvalidValue, cudaErrorInvalidDevice})
    EXPECT_EQ(cuda_status(e, "t").code(), StatusCode::kInvalidArgument) << cudaGetErrorName(e);
  // Fatal to the CUDA context (sticky): never reported as the caller's bad argument.
  for (cudaError_t e : {cudaErrorIllegalAddress, cudaErrorMemoryAllocation, cudaErrorLaunchFailure,
                        cudaErrorNoDevice})
    EXPECT_EQ(cuda_status(e, "t").code(), StatusCode::kInternal) << cudaGetErrorName(e);
}

TEST(NcclErrorsTest, AnErrorPendingBeforeALaunchIsNotReportedAsTheKernels) {
  // Review s8 #11: a user's unchecked error found before the scale kernel's launch is named as
  // what it is (not launched, someone else's error), not as a failure of the kernel.
  Status st = pending_cuda_status(cudaErrorInvalidValue, "nccl allreduce: scale kernel");
  EXPECT_EQ(st.code(), StatusCode::kInternal);
  EXPECT_EQ(st.message(), std::string("nccl allreduce: scale kernel: not launched: CUDA error "
                                      "cudaErrorInvalidValue: ") +
                              cudaGetErrorString(cudaErrorInvalidValue) +
                              " was already pending on this thread (an earlier call's, left "
                              "unchecked; it stays pending for that call's owner)");
}

TEST(NcclErrorsTest, EveryDtypeAndOpHasItsNcclCounterpart) {
  EXPECT_EQ(nccl_dtype(DataType::kUInt8), ncclUint8);
  EXPECT_EQ(nccl_dtype(DataType::kInt8), ncclInt8);
  EXPECT_EQ(nccl_dtype(DataType::kInt32), ncclInt32);
  EXPECT_EQ(nccl_dtype(DataType::kInt64), ncclInt64);
  EXPECT_EQ(nccl_dtype(DataType::kFloat16), ncclFloat16);
  EXPECT_EQ(nccl_dtype(DataType::kBFloat16), ncclBfloat16);
  EXPECT_EQ(nccl_dtype(DataType::kFloat32), ncclFloat32);
  EXPECT_EQ(nccl_dtype(DataType::kFloat64), ncclFloat64);
  EXPECT_EQ(kernel_type(DataType::kUInt8), ScaleType::kUInt8);
  EXPECT_EQ(kernel_type(DataType::kInt8), ScaleType::kInt8);
  EXPECT_EQ(kernel_type(DataType::kInt32), ScaleType::kInt32);
  EXPECT_EQ(kernel_type(DataType::kInt64), ScaleType::kInt64);
  EXPECT_EQ(kernel_type(DataType::kFloat16), ScaleType::kFloat16);
  EXPECT_EQ(kernel_type(DataType::kBFloat16), ScaleType::kBFloat16);
  EXPECT_EQ(kernel_type(DataType::kFloat32), ScaleType::kFloat32);
  EXPECT_EQ(kernel_type(DataType::kFloat64), ScaleType::kFloat64);
  EXPECT_EQ(nccl_op(ReduceOp::kSum), ncclSum);
  // Summed, then divided by the ranks as the host divides (ncclAvg rounds differently).
  EXPECT_EQ(nccl_op(ReduceOp::kAverage), ncclSum);
  EXPECT_EQ(nccl_op(ReduceOp::kMin), ncclMin);
  EXPECT_EQ(nccl_op(ReduceOp::kMax), ncclMax);
  EXPECT_EQ(nccl_op(ReduceOp::kProduct), ncclProd);
}

}  // namespace
}  // namespace kolo::nccl
