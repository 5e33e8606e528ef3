#include "cuda/gemm.hpp"

#include "cuda/bfloat16.hpp"
#include "cuda/cublas_library.hpp"
#include "cuda/cuda_error.hpp"

#include <climits>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace moe::cuda {
namespace {

int as_int(std::int64_t v, const char* what) {
  if (v < 0 || v > INT_MAX)
    throw std::invalid_argument(std::string("gemm: ") + what + " = " + std::to_string(v) +
                                " (cuBLAS takes dimensions in [0, INT_MAX])");
  return static_cast<int>(v);
}

cublasOperation_t cublas_op(Op op) { return op == Op::n ? CUBLAS_OP_N : CUBLAS_OP_T; }

template <typename T>
constexpr cudaDataType_t data_type() {
  if constexpr (std::is_same_v<T, double>) return CUDA_R_64F;
  else if constexpr (std::is_same_v<T, float>) return CUDA_R_32F;
  else return CUDA_R_16BF;
}

}  // namespace

template <typename T>
void gemm(const DeviceContext& ctx, Op op_a, Op op_b, std::int64_t m, std::int64_t n, std::int64_t k, const T* a,
          std::int64_t lda, const T* b, std::int64_t ldb, T* c, std::int64_t ldc, int beta) {
  if (beta != 0 && beta != 1) throw std::invalid_argument("gemm: beta must be 0 (overwrite) or 1 (accumulate)");
  if (m == 0 || n == 0) return;
  if (ctx.mode() == GemmMode::batch_invariant) {
    batch_invariant_gemm<T>(ctx.stream(), op_a, op_b, m, n, k, a, lda, b, ldb, c, ldc, beta);
    return;
  }
  // Column-major Cᵀ[n, m] = op(B)ᵀ·op(A)ᵀ (see gemm.hpp).
  const int M = as_int(n, "n"), N = as_int(m, "m"), K = as_int(k, "k");
  const int LDA = as_int(ldb, "ldb"), LDB = as_int(lda, "lda"), LDC = as_int(ldc, "ldc");
  if constexpr (std::is_same_v<T, double>) {
    const double alpha_d = 1.0, beta_d = beta;
    MOE_CUBLAS_CHECK(cublas().gemm_ex(ctx.cublas_handle(), cublas_op(op_b), cublas_op(op_a), M, N, K, &alpha_d, b,
                                      CUDA_R_64F, LDA, a, CUDA_R_64F, LDB, &beta_d, c, CUDA_R_64F, LDC,
                                      CUBLAS_COMPUTE_64F, CUBLAS_GEMM_DEFAULT));
  } else {
    const float alpha_f = 1.0f, beta_f = static_cast<float>(beta);
    MOE_CUBLAS_CHECK(cublas().gemm_ex(ctx.cublas_handle(), cublas_op(op_b), cublas_op(op_a), M, N, K, &alpha_f, b,
                                      data_type<T>(), LDA, a, data_type<T>(), LDB, &beta_f, c, data_type<T>(), LDC,
                                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
}

template void gemm<double>(const DeviceContext&, Op, Op, std::int64_t, std::int64_t, std::int64_t, const double*,
                           std::int64_t, const double*, std::int64_t, double*, std::int64_t, int);
template void gemm<float>(const DeviceContext&, Op, Op, std::int64_t, std::int64_t, std::int64_t, const float*,
                          std::int64_t, const float*, std::int64_t, float*, std::int64_t, int);
template void gemm<bf16>(const DeviceContext&, Op, Op, std::int64_t, std::int64_t, std::int64_t, const bf16*,
                         std::int64_t, const bf16*, std::int64_t, bf16*, std::int64_t, int);

}  // namespace moe::cuda
