// The router on device: scores for every score function, bias-aware group-limited top-k, the combine weights, and
// the backward to the logits. The CPU counterpart is distributed/train/local_router.hpp; the rules are in docs/layer.md.
// The logits GEMM (x·W_gᵀ) and its backward GEMMs are gemm.hpp calls made by device_router.hpp.
//
// Shapes (row-major, device): logits/scores/grad_logits [n, E]; bias [E]; topk_ids [n, k] int32 in selection
// order; topk_probs / grad_topk_probs [n, k]. Router dtype T is double or float.
// Ties: stable, the lower expert index wins (also among groups). Capacity (dropping, padding) is host control and
// not done here. Limits: E <= 1024, k <= 16, num_groups <= 32. This header stays C++17 (nvcc compiles it).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace moe::cuda {

// The router rules of a MoeConfig, flattened for kernels (router_spec in device_router.hpp builds one).
struct RouterSpec {
  enum class Score : int { softmax, sigmoid, sqrtsoftplus };
  Score score = Score::softmax;
  bool pre_softmax = false;   // softmax: top-k of the softmax (true) or softmax over the top-k logits (false)
  bool use_bias = false;      // expert bias on the ranking (selection only)
  bool hash = false;          // experts from tid2eid[token_id] instead of a ranking
  bool renormalise = false;   // sigmoid/sqrtsoftplus: w /= Σw + renormalise_epsilon
  double renormalise_epsilon = 0;
  double scaling = 1;         // topk_scaling_factor α
  int experts = 0, topk = 0, num_groups = 0, group_topk = 0;
};

// Throws std::invalid_argument naming the limit a spec breaks (see above).
void check_router_spec(const RouterSpec& spec);

// scores = f(logits); topk_ids and topk_probs from the ranking (+ bias). token_ids [n] and tid2eid [V, k] (int64)
// only for hash routing (null otherwise); bias only with use_bias.
template <typename T>
void route_topk(cudaStream_t stream, const RouterSpec& spec, std::int64_t tokens, const T* logits, const T* bias,
                const std::int64_t* token_ids, const std::int64_t* tid2eid, T* scores, std::int32_t* topk_ids,
                T* topk_probs);

// grad_logits [n, E] from grad_topk_probs [n, k] (what unpermute_backward produces).
template <typename T>
void route_backward(cudaStream_t stream, const RouterSpec& spec, std::int64_t tokens, const T* logits,
                    const T* scores, const std::int32_t* topk_ids, const T* grad_topk_probs, T* grad_logits);

}  // namespace moe::cuda
