// Gradient synchronisation by the scaling table (reference/scaling_rules): for each tensor of the shard, the
// pre-scale of its parameter class, the data-parallel collective over its group (dp_cp, or expt_dp for routed
// experts), the extra SUM over tp for sequence-parallel params, and the per-token division by the global
// valid-token count.
#pragma once

#include "distributed/model_shard.hpp"
#include "distributed/rank_groups.hpp"

namespace moe::dist {

template <typename T>
void synchronise_gradients(ModelShard<T>& grads, int first_expert,
                           const ProcessGroups& groups, const RankGroups& comms, LossMode mode, double global_tokens);

}  // namespace moe::dist
