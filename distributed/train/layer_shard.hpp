// What one rank holds of one MoE layer, and how a global layer (reference/moe_layer.hpp's MoeParams, the shared
// vocabulary) is cut into it:
//   router weight, expert bias, tid2eid, shared gate, latent projections: replicated (sequence-parallel params)
//   routed experts: the ep rank's contiguous experts; of each, the ETP slice j of d/etp columns of the hidden
//                   width: fc1 rows [gate j-th slice; up j-th slice] (kept paired), fc2 columns j-th slice
//   shared expert:  the TP slice of its width in the same way
// Gradients have the same shapes, so the oracle's gradient cut the same way is what a rank must hold.
#pragma once

#include "distributed/kernels/grouped_swiglu.hpp"
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

// f applied to every trained tensor (router, experts, shared expert and gate, latent projections), e.g. a cast
// or zeros of the same shape; expert bias and tid2eid are not trained and are left empty.
template <typename To, typename From, typename F>
LayerShard<To> map_trained(const LayerShard<From>& s, F f) {
  LayerShard<To> out;
  out.router_weight = f(s.router_weight);
  for (size_t i = 0; i < s.experts.fc1.size(); ++i) {
    out.experts.fc1.push_back(f(s.experts.fc1[i]));
    out.experts.fc2.push_back(f(s.experts.fc2[i]));
  }
  out.shared_fc1 = f(s.shared_fc1);
  out.shared_fc2 = f(s.shared_fc2);
  out.shared_gate = f(s.shared_gate);
  out.latent_down = f(s.latent_down);
  out.latent_up = f(s.latent_up);
  return out;
}

// The same shapes, all zero (expert bias and tid2eid left empty).
template <typename T>
LayerShard<T> zeros_like(const LayerShard<T>& shard) {
  return map_trained<T>(shard, [](const Matrix<T>& m) { return Matrix<T>::Zero(m.rows(), m.cols()).eval(); });
}

}  // namespace moe::dist
