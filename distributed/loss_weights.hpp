// The loss weights of one microbatch on one rank — what its backward differentiates — chosen so that the
// gradient after synchronisation is the gradient of the global objective J (reference/global_step.hpp):
//   sum / avg:  CE_local·cp/(m·N_mb) + aux_share·cp/m + z_share·cp/m        (MoEAuxLossAutoScaler: cp/m)
//               global_aux: aux_share·dp·cp/m — the group's loss is the sum of all replicas' shares; Megatron's
//               cp/m leaves its gradient 1/dp too small (research/megatron.md §8.5)
//   per_token:  CE_local + (aux_share + z_share)·N_mb                         (N_mb over tp_cp, as Megatron dev)
//               global_aux: aux_share·N_step (N_step over tp_dp_cp)
// N_mb is the microbatch's valid-token count, N_step that of the step over all replicas, m the microbatches per
// replica. J itself is Σ_ranks(weighted losses) / (dp·cp), or / N in per_token mode.
#pragma once

#include "reference/model.hpp"
#include "reference/parallel_layout.hpp"
#include "reference/scaling_rules.hpp"

namespace moe::dist {

struct LossWeights {
  double ce, aux, z;
};

LossWeights loss_weights(const ModelConfig& config, LossMode mode, const ParallelLayout& layout, int num_microbatches,
                         double microbatch_tokens, double step_tokens);

}  // namespace moe::dist
