// DeviceContext: the stream and cuBLAS handle one thread's kernels run on, and the GEMM mode.
//   GemmMode::cublas           cuBLAS (fp32 compute for float/bf16 data, no TF32; fp64 for double): fast, but
//                              the kernel cuBLAS picks depends on the shape, so a row's result may depend on how
//                              many rows share its GEMM;
//   GemmMode::batch_invariant  our fixed-order tiled GEMM (batch_invariant_gemm.cu): every output element sums
//                              its k products in increasing k, whatever m and n are, so a token's output does not
//                              depend on the other tokens in the batch (the deterministic mode). Slow.
// Kernels are enqueued on stream(); host wrappers that need data on the host (group sizes) synchronise it.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

namespace moe::cuda {

enum class GemmMode { cublas, batch_invariant };

class DeviceContext {
 public:
  // Uses the current device (cudaSetDevice before constructing one per thread).
  explicit DeviceContext(GemmMode mode = GemmMode::cublas);
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;
  ~DeviceContext();

  cudaStream_t stream() const { return stream_; }
  cublasHandle_t cublas_handle() const { return cublas_; }
  GemmMode mode() const { return mode_; }
  void synchronize() const;

 private:
  GemmMode mode_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
};

}  // namespace moe::cuda
