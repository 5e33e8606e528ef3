// The loss weights of one microbatch on one rank — what its backward differentiates — chosen so that the
// gradient after synchronisation is the gradient of the global objective J (reference/global_step.hpp) under the
// model's semantics. They are the loss-scale table's rows (reference/scaling_rules.hpp: loss_scale_table, the
// table `moe-oracle scaling` prints) evaluated on this microbatch's token counts:
//   sum / avg (intended):  CE_local·cp/(m·N_mb) + aux_share·cp/m + z_share·cp/m
//                          global_aux: aux_share·dp·cp/m (the group's loss is the sum of all replicas' shares)
//   per_token (intended):  CE_local + (aux_share + z_share)·N_mb;  global_aux: aux_share·N_step
// and the rows of the Megatron deviations where the semantics turn them on (ce-per-cp-rank: CE_local/(m·N_c);
// per-token-aux-local-tokens: aux_share·n_local·|tp_cp|; global-aux-dp-average: global_aux weighted as aux).
// J itself is Σ_ranks(weighted losses) / (dp·cp), or / N in per_token mode.
#pragma once

#include "reference/model.hpp"
#include "reference/scaling_rules.hpp"

namespace moe::dist {

struct LossWeights {
  double ce, aux, z;
};

// m = microbatches per replica; config.semantics() says which rows apply. CE's weight is evaluated on the loss
// mask's counts, aux's and z's on the router's (they differ under router-counts-padding).
LossWeights loss_weights(const ModelConfig& config, LossMode mode, const GroupSizes& sizes, int num_microbatches,
                         const TokenCounts& loss_counts, const TokenCounts& router_counts);

}  // namespace moe::dist
