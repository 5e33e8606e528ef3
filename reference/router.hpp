// The router: logits → scores → selected experts I_t → weights g_{t,e} → capacity → probs and routing map.
//
// Per token t (docs/layer.md):
//   l_t = W_g·x_t                                    logits [E]
//   s_t = softmax(l_t) | σ(l_t) | sqrt(softplus(l_t)) scores [E]
//   I_t = topk(r_t) over the kept groups             r = s+β (sigmoid/sqrtsoftplus), softmax prob (pre), l (post)
//       = tid2eid[input_id_t]                        (hash layers)
//   g_t = α · softmax(l_{I_t})                       post-softmax
//       = α · s_{I_t}                                pre-softmax, and softmax on hash layers
//       = α · s_{I_t} / (Σ s_{I_t} + ε)              sigmoid/sqrtsoftplus (ε and when: Normalization)
// Selection is piecewise constant, so the backward flows through the weights only.
#pragma once

#include "reference/config.hpp"
#include "reference/moe_layer.hpp"
#include "reference/tensor.hpp"

#include <vector>

namespace moe {

// The k largest entries of `ranking`, largest first; on ties the lower index wins (a stable sort).
template <typename T>
std::vector<int> stable_topk(const RowVector<T>& ranking, int k);

template <typename T>
RowVector<T> router_scores(const MoeConfig& config, const RowVector<T>& logits);

// dL/dl from dL/ds for one token's scores.
template <typename T>
RowVector<T> router_scores_backward(const MoeConfig& config, const RowVector<T>& logits, const RowVector<T>& scores,
                                    const RowVector<T>& grad_scores);

// r_t, what selection ranks (before group masking): s + β (sigmoid/sqrtsoftplus with an expert bias), s, the softmax
// probability (pre-softmax) or the logit (post-softmax).
template <typename T>
RowVector<T> ranking_scores(const MoeConfig& config, const RowVector<T>& logits, const RowVector<T>& scores,
                            const Vector<T>& expert_bias);

// I_t for a score-routed (non-hash) token: the ranking score, then group-limited masking, then stable top-k.
template <typename T>
std::vector<int> select_experts(const MoeConfig& config, const RowVector<T>& logits, const RowVector<T>& scores,
                                const Vector<T>& expert_bias);

// g_t over the selected experts, in selection order (α included).
template <typename T>
RowVector<T> topk_weights(const MoeConfig& config, const RowVector<T>& logits, const RowVector<T>& scores,
                          const std::vector<int>& selected);

// dL/dl for one token from dL/dg (one entry per selected expert).
template <typename T>
RowVector<T> topk_weights_backward(const MoeConfig& config, const RowVector<T>& logits, const RowVector<T>& scores,
                                   const std::vector<int>& selected, const RowVector<T>& grad_weights);

// The whole router of the layer, capacity included (see capacity.hpp). Inputs are already validated.
template <typename T>
Routing<T> route(const MoeConfig& config, const MoeParams<T>& params, const MoeInputs<T>& inputs);

// dL/dlogits [T, E] from dL/dprobs [T, E]. Dropped and padded slots carry no gradient: their probability is the
// constant 0. Kept slots differentiate through the normalisation over all k selected (dropping comes after it).
template <typename T>
Matrix<T> route_backward(const MoeConfig& config, const Routing<T>& routing, const Matrix<T>& grad_probs);

}  // namespace moe
