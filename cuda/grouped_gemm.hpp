// Grouped GEMM: one row-major GEMM per group (a rank's local experts), all with the same ops and beta but each with
// its own sizes and pointers, run as DeviceContext::grouped() says (device_context.hpp). Implemented in gemm.cpp,
// beside the single GEMM whose cuBLAS call it shares.
#pragma once

#include "cuda/bfloat16.hpp"
#include "cuda/gemm.hpp"

#include <cstdint>
#include <span>

namespace moe::cuda {

// Every problem's C = op(A)·op(B) + beta·C, all with the same ops and beta, run as ctx.grouped() says
// (device_context.hpp); each problem's result is what gemm() computes for it alone, up to the kernel cuBLAS picks.
// Problems with m = 0 or n = 0 are skipped. GemmMode::batch_invariant runs the fixed-order kernel per problem.
// Double data runs on lanes or per group: cuBLAS's grouped call has no fp64 path (one_launch runs it on lanes).
template <typename T>
void grouped_gemm(const DeviceContext& ctx, Op op_a, Op op_b, std::span<const GemmProblem<T>> problems, int beta);

// The same with bf16 operands and float results, accumulated in fp32: a float computation whose operands all hold
// bf16 values (bf16 storage), run at bf16 speed. GroupedGemm::cutlass runs CUTLASS's float-output kernels (falling
// back to lanes as above); the other ways run cublasGemmEx with bf16 inputs and a float C on lanes. Not in
// GemmMode::batch_invariant (it throws).
void grouped_gemm_bf16_operands(const DeviceContext& ctx, Op op_a, Op op_b,
                                std::span<const GemmProblem<bf16, float>> problems, int beta);

}  // namespace moe::cuda
