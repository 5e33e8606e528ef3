// The deterministic-mode GEMM (device_context.hpp): 16×16 output tiles staged through shared memory; each thread
// owns one element of C and accumulates its k products in increasing k with FMAs in the accumulation type. The
// order depends on nothing but k, so a row of C is the same bits whatever else is in the batch. Transposes are
// strides, not copies. Meant for tests and the deterministic mode, not for speed.
#include "cuda/cuda_error.hpp"
#include "cuda/device_math.cuh"
#include "cuda/gemm.hpp"

namespace moe::cuda {
namespace {

constexpr int tile = 16;

template <typename D, typename A>
__global__ void batch_invariant_gemm_kernel(std::int64_t m, std::int64_t n, std::int64_t k, const D* a,
                                            std::int64_t a_row, std::int64_t a_col, const D* b, std::int64_t b_row,
                                            std::int64_t b_col, D* c, std::int64_t ldc, int beta) {
  __shared__ A a_tile[tile][tile];
  __shared__ A b_tile[tile][tile];
  // Rows on grid.x (up to 2^31 − 1 tiles), columns on grid.y (65535 tiles: 1M columns, far above any width).
  const std::int64_t i = std::int64_t(blockIdx.x) * tile + threadIdx.y;
  const std::int64_t j = std::int64_t(blockIdx.y) * tile + threadIdx.x;
  A acc = 0;
  for (std::int64_t k0 = 0; k0 < k; k0 += tile) {
    const std::int64_t ka = k0 + threadIdx.x, kb = k0 + threadIdx.y;
    a_tile[threadIdx.y][threadIdx.x] = (i < m && ka < k) ? load_acc(a + i * a_row + ka * a_col) : A(0);
    b_tile[threadIdx.y][threadIdx.x] = (kb < k && j < n) ? load_acc(b + kb * b_row + j * b_col) : A(0);
    __syncthreads();
    const int depth = k - k0 < tile ? int(k - k0) : tile;
    for (int p = 0; p < depth; ++p) acc = fma(a_tile[threadIdx.y][p], b_tile[p][threadIdx.x], acc);
    __syncthreads();
  }
  if (i < m && j < n) {
    D* out = c + i * ldc + j;
    store_acc(out, beta ? load_acc(out) + acc : acc);
  }
}

}  // namespace

template <typename T>
void batch_invariant_gemm(cudaStream_t stream, Op op_a, Op op_b, std::int64_t m, std::int64_t n, std::int64_t k,
                          const T* a, std::int64_t lda, const T* b, std::int64_t ldb, T* c, std::int64_t ldc,
                          int beta) {
  // Element (i, p) of op(A) sits at a[i*a_row + p*a_col]; likewise (p, j) of op(B).
  const std::int64_t a_row = op_a == Op::n ? lda : 1, a_col = op_a == Op::n ? 1 : lda;
  const std::int64_t b_row = op_b == Op::n ? ldb : 1, b_col = op_b == Op::n ? 1 : ldb;
  const dim3 block(tile, tile);
  const dim3 grid(unsigned((m + tile - 1) / tile), unsigned((n + tile - 1) / tile));
  batch_invariant_gemm_kernel<Dev<T>, Acc<T>><<<grid, block, 0, stream>>>(
      m, n, k, reinterpret_cast<const Dev<T>*>(a), a_row, a_col, reinterpret_cast<const Dev<T>*>(b), b_row, b_col,
      reinterpret_cast<Dev<T>*>(c), ldc, beta);
  check_launch("batch_invariant_gemm_kernel");
}

#define MOE_INSTANTIATE_BATCH_INVARIANT_GEMM(T)                                                                  \
  template void batch_invariant_gemm<T>(cudaStream_t, Op, Op, std::int64_t, std::int64_t, std::int64_t, const T*, \
                                        std::int64_t, const T*, std::int64_t, T*, std::int64_t, int);
MOE_INSTANTIATE_BATCH_INVARIANT_GEMM(double)
MOE_INSTANTIATE_BATCH_INVARIANT_GEMM(float)
MOE_INSTANTIATE_BATCH_INVARIANT_GEMM(bf16)

}  // namespace moe::cuda
