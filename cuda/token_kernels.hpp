// Token data work of the dispatchers on device: the routing's permutation, permute, unpermute (combine), their
// backwards, row gathers and ordered scatter-adds. The CPU counterparts are distributed/kernels/token_kernels.hpp.
//
// Shapes (row-major, device pointers, n tokens, k = top-k, R = n·k permuted rows, w = width):
//   topk [n, k] int32 expert ids in selection order;  slot s = t·k + j is token t's j-th choice.
//   row_slot [R]: permuted row i holds slot row_slot[i]; rows are expert-major and, within an expert, in slot
//   (= token) order, as Megatron's permute orders them.  slot_row [n·k]: the inverse.
// Nothing here uses atomics on data: every output element is written by one thread, sums run in a fixed order,
// so results are deterministic and batch-invariant (a token's rows depend only on that token).
// All functions enqueue on `stream` and return at once. This header stays C++17 (nvcc compiles it).
#pragma once

#include "cuda/element.hpp"

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace moe::cuda {

// row_slot, slot_row as above; tokens_per_expert [E] (int64, on device). topk entries must lie in [0, E).
void build_permutation(cudaStream_t stream, std::int64_t tokens, int topk, int experts, const std::int32_t* topk_ids,
                       std::int32_t* row_slot, std::int32_t* slot_row, std::int64_t* tokens_per_expert);

// out[i] = x[index[i] / divisor] for i < rows, rows of row_bytes bytes: the one gather behind permute (divisor k
// maps a slot to its token), chunk sort and the probability gathers.
void gather_rows(cudaStream_t stream, const void* x, std::size_t row_bytes, const std::int32_t* index,
                 std::int64_t rows, int divisor, void* out);

// Permute: out [R, w] = token rows in row_slot order (duplicated k times); permuted_probs [R] carries
// topk_probs [n·k] along (skipped when either is null).
template <typename T>
void permute(cudaStream_t stream, const T* x, std::int64_t width, std::int64_t tokens, int topk,
             const std::int32_t* row_slot, const Acc<T>* topk_probs, T* out, Acc<T>* permuted_probs) {
  const std::int64_t rows = tokens * topk;
  gather_rows(stream, x, sizeof(T) * std::size_t(width), row_slot, rows, topk, out);
  if (topk_probs != nullptr && permuted_probs != nullptr)
    gather_rows(stream, topk_probs, sizeof(Acc<T>), row_slot, rows, 1, permuted_probs);
}

// Unpermute: out[t] = Σ_j p[t, j]·y[slot_row[t·k + j]] (p = topk_probs, or 1 when null), summed in increasing
// permuted-row order (expert order), which is the order of CPU scatter_add_rows over the permuted rows; float and
// double results equal the CPU's bit for bit.
template <typename T>
void unpermute(cudaStream_t stream, const T* y, std::int64_t width, std::int64_t tokens, int topk,
               const std::int32_t* slot_row, const Acc<T>* topk_probs, T* out);

// Backward of the weighted unpermute: dy[slot_row[s]] = p[s]·dout[s / k] (p = 1 when topk_probs is null) and,
// when dprobs is not null, dprobs[s] = ⟨dout[s / k], y[slot_row[s]]⟩ (a fixed-order block reduction).
template <typename T>
void unpermute_backward(cudaStream_t stream, const T* dout, const T* y, std::int64_t width, std::int64_t tokens,
                        int topk, const std::int32_t* slot_row, const Acc<T>* topk_probs, T* dy, Acc<T>* dprobs);

// out[o] += Σ_{i ∈ sources[offsets[o] .. offsets[o+1])} weight[i]·y[i] (weight = 1 when null), in the listed
// order: the gather form of CPU scatter_add_rows (its plan comes from make_scatter_plan, row_plans.hpp).
template <typename T>
void scatter_add_rows(cudaStream_t stream, const T* y, std::int64_t width, const std::int32_t* offsets,
                      const std::int32_t* sources, const Acc<T>* weights, std::int64_t out_rows, T* out);

// out[i] = in[i] converted (round to nearest even into bf16).
template <typename From, typename To>
void convert(cudaStream_t stream, const From* in, To* out, std::int64_t count);

}  // namespace moe::cuda
