// Grouped SwiGLU over the local experts of one rank, on its ETP shard of each expert (Eigen GEMMs + OpenMP).
//
// Rows arrive grouped by local expert (group_sizes[i] rows for local expert i, back to back). With ETP the
// rank holds the column shard of fc1 (gate rows and up rows of its d/etp slice, kept paired) and the matching
// row shard of fc2, so its output is a partial sum that the ETP reduce-scatter completes:
//   pre = x·fc1ᵀ [n, 2·d_l];  act = silu(min(gate, L)) ⊙ clip(up, ±L);  y_partial = (p ⊙ act)·fc2ᵀ
// With probs on the input (k = 1): pre = (p ⊙ x)·fc1ᵀ and y_partial = act·fc2ᵀ.
// The backward returns dx (partial over ETP as well) and dp (partial: summed over ETP by the dispatcher's
// reverse collective) and accumulates the weight gradients.
#pragma once

#include "distributed/kernels/expert_kernel_types.hpp"

#include <cstdint>
#include <vector>

namespace moe::kernels {

template <typename T>
GroupedSwigluForward<T> grouped_swiglu_forward(const Matrix<T>& x, const std::vector<std::int64_t>& group_sizes,
                                               const ExpertShards<T>& w, const Vector<T>& probs,
                                               const SwigluOptions& options);

// Accumulates into grads.fc1 / grads.fc2 (same shapes as w).
template <typename T>
GroupedSwigluBackward<T> grouped_swiglu_backward(const Matrix<T>& x, const std::vector<std::int64_t>& group_sizes,
                                                 const ExpertShards<T>& w, const Vector<T>& probs,
                                                 const SwigluOptions& options, const Matrix<T>& pre,
                                                 const Matrix<T>& dy, ExpertShards<T>& grads);

}  // namespace moe::kernels
