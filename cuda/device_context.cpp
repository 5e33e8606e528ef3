#include "cuda/device_context.hpp"

#include "cuda/cublas_library.hpp"
#include "cuda/cuda_error.hpp"

namespace moe::cuda {

DeviceContext::DeviceContext(GemmMode mode) : mode_(mode) {
  // A blocking stream: it waits for work on the legacy default stream, where DeviceBuffer's blocking uploads and
  // default zero() run (a pageable cudaMemcpy may return before its DMA lands), so no caller has to order those.
  MOE_CUDA_CHECK(cudaStreamCreate(&stream_));
  try {
    MOE_CUBLAS_CHECK(cublas().create(&cublas_));
    MOE_CUBLAS_CHECK(cublas().set_stream(cublas_, stream_));
    // Plain fp32 arithmetic for float data: TF32 would make float results incomparable with the CPU's.
    MOE_CUBLAS_CHECK(cublas().set_math_mode(cublas_, CUBLAS_DEFAULT_MATH));
  } catch (...) {
    if (cublas_ != nullptr) cublas().destroy(cublas_);
    cudaStreamDestroy(stream_);
    throw;
  }
}

DeviceContext::~DeviceContext() {
  cublas().destroy(cublas_);
  cudaStreamDestroy(stream_);
}

void DeviceContext::synchronize() const { MOE_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

}  // namespace moe::cuda
