// CUDA, cuBLAS and NCCL status codes turned into exceptions that name the failed call and the library's own error
// string (docs/architecture.md: errors are exceptions naming the rule). The macros exist only to stringify the call.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

namespace moe::cuda {

// Throws std::runtime_error("CUDA: <call> failed: <cudaGetErrorString> (<cudaGetErrorName>)") unless success.
void check_cuda(cudaError_t status, const char* call);
// Throws std::runtime_error("cuBLAS: <call> failed: <cublasGetStatusString>") unless success.
void check_cublas(cublasStatus_t status, const char* call);
// After a kernel launch: turns a launch-configuration error into an exception naming the kernel.
void check_launch(const char* kernel);

}  // namespace moe::cuda

#define MOE_CUDA_CHECK(call) ::moe::cuda::check_cuda((call), #call)
#define MOE_CUBLAS_CHECK(call) ::moe::cuda::check_cublas((call), #call)
