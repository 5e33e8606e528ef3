// What one rank holds of one MoE layer, and how a global layer (reference/moe_layer.hpp's MoeParams, the shared
// vocabulary) is cut into it:
//   router weight, expert bias, tid2eid, shared gate, latent projections: replicated (sequence-parallel params)
//   routed experts: the ep rank's contiguous experts; of each, the ETP slice j of d/etp columns of the hidden
//                   width: fc1 rows [gate j-th slice; up j-th slice] (kept paired), fc2 columns j-th slice
//   shared expert:  the TP slice of its width in the same way
// Gradients have the same shapes, so the oracle's gradient cut the same way is what a rank must hold.
#pragma once

#include "distributed/grouped_swiglu.hpp"
#include "reference/config.hpp"
#include "reference/moe_layer.hpp"
#include "reference/process_groups.hpp"

namespace moe::dist {

template <typename T>
struct LayerShard {
  Matrix<T> router_weight;         // [E, h]
  Vector<T> expert_bias;           // [E] or empty
  IndexMatrix tid2eid;             // [V, k] or empty
  kernels::ExpertShards<T> experts;  // local experts: fc1 [2d/etp, w], fc2 [w, d/etp]
  Matrix<T> shared_fc1;            // [2·ds/tp, h] or empty
  Matrix<T> shared_fc2;            // [h, ds/tp] or empty
  Matrix<T> shared_gate;           // [1, h] or empty
  Matrix<T> latent_down;           // [latent, h] or empty
  Matrix<T> latent_up;             // [h, latent] or empty
};

// Throws std::invalid_argument when etp does not divide ffn_hidden or tp the shared expert's width.
template <typename T>
LayerShard<T> shard_layer(const MoeConfig& config, const MoeParams<T>& global, const ProcessGroups& groups, int rank);

// The same shapes, all zero (expert bias and tid2eid left empty).
template <typename T>
LayerShard<T> zeros_like(const LayerShard<T>& shard);

}  // namespace moe::dist
