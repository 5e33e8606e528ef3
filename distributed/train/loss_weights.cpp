#include "distributed/train/loss_weights.hpp"

#include "distributed/seeded_bugs.hpp"

namespace moe::dist {

LossWeights loss_weights(const ModelConfig& c, LossMode mode, const GroupSizes& sizes, int m,
                         const TokenCounts& loss_counts, const TokenCounts& router_counts) {
  const auto table = loss_scale_table(mode, sizes, m, c.semantics());
  const bool global_aux = c.layer.aux_loss_type == AuxLossType::global_aux;
  TokenCounts ce = loss_counts;
#if MOE_SEEDED_BUG == MOE_BUG_CE_PER_CP_RANK_MICROBATCH_COUNT
  ce.cp_rank = ce.microbatch;  // each CP rank's CE divided by the whole microbatch's count
#endif
  const TokenCounts& n = router_counts;
  LossWeights w{loss_weight(loss_scale(table, LossTerm::ce), ce),
                loss_weight(loss_scale(table, global_aux ? LossTerm::global_aux : LossTerm::aux), n),
                loss_weight(loss_scale(table, LossTerm::z), n)};
#if MOE_SEEDED_BUG == MOE_BUG_PER_TOKEN_AUX_MISSING_TP_CP
  if (mode == LossMode::per_token && !global_aux) w.aux = n.local;  // × this rank's tokens only
#elif MOE_SEEDED_BUG == MOE_BUG_AUX_SCALE_MISSING_CP
  if (mode != LossMode::per_token && !global_aux) w.aux /= sizes.cp;  // 1/m, not cp/m
#elif MOE_SEEDED_BUG == MOE_BUG_GLOBAL_AUX_DP_TOO_SMALL
  if (mode != LossMode::per_token && global_aux) w.aux /= sizes.dp_cp / sizes.cp;  // the replicas' mean
#endif
  return w;
}

}  // namespace moe::dist
