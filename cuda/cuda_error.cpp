#include "cuda/cuda_error.hpp"

#include "cuda/cublas_library.hpp"

#include <stdexcept>
#include <string>

namespace moe::cuda {

void check_cuda(cudaError_t status, const char* call) {
  if (status == cudaSuccess) return;
  throw std::runtime_error(std::string("CUDA: ") + call + " failed: " + cudaGetErrorString(status) + " (" +
                           cudaGetErrorName(status) + ")");
}

void check_cublas(cublasStatus_t status, const char* call) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw std::runtime_error(std::string("cuBLAS: ") + call + " failed: " + cublas().status_string(status));
}

void check_launch(const char* kernel) {
  const cudaError_t status = cudaGetLastError();
  if (status == cudaSuccess) return;
  throw std::runtime_error(std::string("CUDA: launch of ") + kernel + " failed: " + cudaGetErrorString(status) +
                           " (" + cudaGetErrorName(status) + ")");
}

}  // namespace moe::cuda
