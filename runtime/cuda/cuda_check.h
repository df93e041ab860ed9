// Turns CUDA, cuBLAS, cuDNN and NCCL status codes into graphrun::Error naming the failed call (an
// allocation that failed into graphrun::OutOfMemory, which the evaluation answers with a smaller batch).
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "graph/error.h"

#define GR_CUDA_CHECK(call)                                                                      \
  do {                                                                                           \
    cudaError_t gr_e_ = (call);                                                                  \
    if (gr_e_ == cudaErrorMemoryAllocation) {                                                    \
      cudaGetLastError();                                                                        \
      GR_FAIL_OUT_OF_MEMORY(#call << " failed: " << cudaGetErrorString(gr_e_));                  \
    }                                                                                            \
    if (gr_e_ != cudaSuccess) GR_FAIL(#call << " failed: " << cudaGetErrorString(gr_e_));       \
  } while (0)

#define GR_CUBLAS_CHECK(call)                                                                    \
  do {                                                                                           \
    cublasStatus_t gr_e_ = (call);                                                               \
    if (gr_e_ == CUBLAS_STATUS_ALLOC_FAILED)                                                     \
      GR_FAIL_OUT_OF_MEMORY(#call << " failed: " << cublasGetStatusString(gr_e_));               \
    if (gr_e_ != CUBLAS_STATUS_SUCCESS) GR_FAIL(#call << " failed: " << cublasGetStatusString(gr_e_)); \
  } while (0)

#define GR_CUDNN_CHECK(call)                                                                     \
  do {                                                                                           \
    cudnnStatus_t gr_e_ = (call);                                                                \
    if (gr_e_ == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED ||                           \
        gr_e_ == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED)                           \
      GR_FAIL_OUT_OF_MEMORY(#call << " failed: " << cudnnGetErrorString(gr_e_));                 \
    if (gr_e_ != CUDNN_STATUS_SUCCESS) GR_FAIL(#call << " failed: " << cudnnGetErrorString(gr_e_)); \
  } while (0)

// After a kernel launch: reports a bad launch configuration (not errors of the running kernel,
// which surface at the next synchronising call).
#define GR_LAUNCH_CHECK(kernel_name) GR_CUDA_CHECK(cudaGetLastError())
