// The router's losses: load-balancing aux losses (aux, seq_aux, global_aux) and the z-loss, each with its
// coefficient included, and their gradients with respect to the logits.
//
// The aux losses use their own routing map: the plain top-k of the normalised scores s' (softmax: the full
// softmax; sigmoid/sqrtsoftplus: s / (Σ_E s + 1e-20)) — no bias, no groups, no dropping, not the hash table.
// Padded tokens (padding_mask) are left out of every statistic.
//   aux        = coeff·E/(k·T²) · Σ_e P_e·c_e          P_e = Σ_t s'_{t,e}, c_e = #{t : e ∈ topk(s'_t)}
//   seq_aux    = mean over the batch b of aux on the rows {s·batch + b} (T = that sequence's tokens)
//   global_aux = aux with c replaced by the counts accumulated over the global batch so far, divided by the
//                number of microbatches (Megatron's global_tokens_per_expert / ga_steps); T is this microbatch's
//   z          = coeff · mean_t logsumexp(l_t)²
// Under a Megatron profile (semantics.hpp): z-loss-local-mean makes z = Σ_parts coeff/P · mean over the part, and
// seq-aux-mean-length gives every sequence of the call one T, the mean valid length of its sequences.
// Counts are statistics: no gradient flows through them.
#pragma once

#include "reference/config.hpp"
#include "reference/moe_layer.hpp"
#include "reference/tensor.hpp"

#include <vector>

namespace moe {

template <typename T>
struct RouterLoss {
  T value = 0;
  Matrix<T> grad_logits;  // d value / d logits, [T, E]
};

template <typename T>
struct AuxLoss : RouterLoss<T> {
  Vector<T> row_values;              // [T] each row's part of value: value is a sum of per-row terms, and row t's
                                     // term depends on row t's logits only (the counts are statistics)
  std::vector<std::int64_t> counts;  // [E] this microbatch's aux-map counts over valid tokens
  GlobalAuxState global_aux;         // state after this microbatch (global_aux only; else a copy of the input)
};

// s' for one token.
template <typename T>
RowVector<T> aux_scores(const MoeConfig& config, const RowVector<T>& scores);

// Requires config.aux_loss_type != none. Uses the inputs' seq, batch (rows t = s·batch + b), padding_mask and
// global_aux state and group.
template <typename T>
AuxLoss<T> aux_loss(const MoeConfig& config, const Routing<T>& routing, const MoeInputs<T>& inputs);

// Requires config.z_loss_coeff > 0. `partition` (the capacity partition, one part per tp×cp source rank; empty =
// one part) matters only under z-loss-local-mean.
template <typename T>
RouterLoss<T> z_loss(const MoeConfig& config, const Matrix<T>& logits, const std::vector<bool>& padding_mask,
                     const std::vector<std::vector<int>>& partition = {});

}  // namespace moe
