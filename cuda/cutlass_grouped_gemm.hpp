// bf16 grouped GEMM in one launch: CUTLASS's Hopper "ptr-array" grouped kernel (TMA loads into shared memory,
// wgmma on two consumer warp groups, a persistent scheduler that walks the tiles of every group in one grid), bf16
// in, fp32 accumulation, bf16 or float out. Why CUTLASS and not cuBLAS's grouped call: on the H200 (2026-12-04)
// cublasGemmGroupedBatchedEx ran our 256 experts of ~192 rows at 27-28% of dense cuBLAS, below one cublasGemmEx per
// expert on 8 streams (38.6%); a persistent grouped kernel keeps every SM on one launch's tile queue instead.
// CUTLASS is headers only, taken from the nvidia-cutlass wheel (tools/gpu-kit) and built when CMake finds it
// (MOE_CUTLASS_DIR); without it cutlass_grouped_available() is false and the grouped GEMM runs on lanes.
//
// The problems are the row-major ones of grouped_gemm.hpp. CUTLASS sees each as its column-major transpose, as
// cuBLAS does (gemm.hpp): C[m, n] = op(A)·op(B) is Cᵀ[n, m] = op(B)ᵀ·op(A)ᵀ, so a rank's weights are the kernel's M
// and its tokens the N. Three kernels (ops of A, B): (n, t) forward, (n, n) data gradient, (t, n) weight gradient,
// for each output type: bf16 (the benchmark's bf16 layer) and float (bf16 operands of a float step with bf16 storage,
// whose results and weight gradients stay float, as `check --kernels cuda --dtype bf16` runs them).
// This header stays C++17 (nvcc compiles it).
#pragma once

#include "cuda/bfloat16.hpp"
#include "cuda/gemm.hpp"

#include <cstddef>
#include <cstdint>

namespace moe::cuda {

// Whether the kernel takes problem p of ops (op_a, op_b): not ops (t, t), k > 0, and TMA's rules in the column-major
// view (A' = our B, B' = our A, C' = our C): every matrix 16-byte aligned, its leading dimension and its contiguous
// extent a multiple of 16 bytes. The contiguous extents: A' its M' = n (op_b = n) or K; B' its K (op_a = n) or N'
// = m; C' its M' = n.
template <typename Out>
bool cutlass_takes(Op op_a, Op op_b, const GemmProblem<bf16, Out>& p) {
  const auto fits = [](const void* at, std::int64_t ld, std::int64_t contiguous, std::int64_t per_16_bytes) {
    return reinterpret_cast<std::uintptr_t>(at) % 16 == 0 && ld % per_16_bytes == 0 && contiguous % per_16_bytes == 0;
  };
  constexpr std::int64_t bf16s = 8, outs = 16 / sizeof(Out);
  return !(op_a == Op::t && op_b == Op::t) && p.k > 0 && fits(p.b, p.ldb, op_b == Op::n ? p.n : p.k, bf16s) &&
         fits(p.a, p.lda, op_a == Op::n ? p.k : p.m, bf16s) && fits(p.c, p.ldc, p.n, outs);
}

// Whether this build has the kernel (CMake found CUTLASS).
bool cutlass_grouped_available();

// Every problem's C = op(A)·op(B) + beta·C in one launch on `stream`, returning true; or false, having done nothing,
// where the kernel does not take one of them (cutlass_takes, or CUTLASS's own can_implement). Problems with m = 0 or
// n = 0 must have been removed. Its small argument arrays go to the device through stream-ordered memory.
bool cutlass_grouped_gemm(cudaStream_t stream, Op op_a, Op op_b, const GemmProblem<bf16>* problems, std::size_t count,
                          int beta);
bool cutlass_grouped_gemm(cudaStream_t stream, Op op_a, Op op_b, const GemmProblem<bf16, float>* problems,
                          std::size_t count, int beta);

}  // namespace moe::cuda
