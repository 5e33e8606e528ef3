// Row-major GEMM on device: C[m, n] = op(A)·op(B) + beta·C, with op(X) = X or Xᵀ, leading dimensions given as
// row strides (the torch/Eigen row-major view that the rest of the project uses). beta is 0 or 1 (overwrite or
// accumulate, as weight gradients do). Dispatches on DeviceContext::mode() (device_context.hpp). Groups of GEMMs:
// grouped_gemm.hpp. This header stays C++17 (nvcc compiles it).
//   cuBLAS is column-major: a row-major X is the column-major Xᵀ, so C = op(A)·op(B) is computed as
//   Cᵀ = op(B)ᵀ·op(A)ᵀ, i.e. cublasGemmEx(op_b, op_a, n, m, k, B, ldb, A, lda, C, ldc).
#pragma once

#include "cuda/device_context.hpp"

#include <cstdint>

namespace moe::cuda {

enum class Op { n, t };

// One group's GEMM of a grouped GEMM (grouped_gemm.hpp): its own sizes, pointers and strides (same meaning as gemm's
// arguments). Out differs from T for bf16 operands with a float result (grouped_gemm_bf16_operands).
template <typename T, typename Out = T>
struct GemmProblem {
  std::int64_t m = 0, n = 0, k = 0;
  const T* a = nullptr;
  std::int64_t lda = 0;
  const T* b = nullptr;
  std::int64_t ldb = 0;
  Out* c = nullptr;
  std::int64_t ldc = 0;
};

template <typename T>
void gemm(const DeviceContext& ctx, Op op_a, Op op_b, std::int64_t m, std::int64_t n, std::int64_t k, const T* a,
          std::int64_t lda, const T* b, std::int64_t ldb, T* c, std::int64_t ldc, int beta);

// The fixed-order kernel behind GemmMode::batch_invariant (batch_invariant_gemm.cu); same contract as gemm.
template <typename T>
void batch_invariant_gemm(cudaStream_t stream, Op op_a, Op op_b, std::int64_t m, std::int64_t n, std::int64_t k,
                          const T* a, std::int64_t lda, const T* b, std::int64_t ldb, T* c, std::int64_t ldc,
                          int beta);

}  // namespace moe::cuda
