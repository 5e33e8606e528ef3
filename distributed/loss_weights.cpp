#include "distributed/loss_weights.hpp"

#include "distributed/seeded_bugs.hpp"

namespace moe::dist {

LossWeights loss_weights(const ModelConfig& c, LossMode mode, const ParallelLayout& l, int m, double n_mb,
                         double n_step) {
  const bool global_aux = c.layer.aux_loss_type == AuxLossType::global_aux;
#if MOE_SEEDED_BUG == MOE_BUG_PER_TOKEN_AUX_MISSING_TP_CP
  if (mode == LossMode::per_token) return {1.0, global_aux ? n_step : n_mb / (l.tp * l.cp), n_mb};
#else
  if (mode == LossMode::per_token) return {1.0, global_aux ? n_step : n_mb, n_mb};
#endif
  const double cp_over_m = static_cast<double>(l.cp) / m;
#if MOE_SEEDED_BUG == MOE_BUG_AUX_SCALE_MISSING_CP
  return {n_mb > 0 ? cp_over_m / n_mb : 0.0, global_aux ? l.dp() * cp_over_m : 1.0 / m, cp_over_m};
#elif MOE_SEEDED_BUG == MOE_BUG_GLOBAL_AUX_DP_TOO_SMALL
  return {n_mb > 0 ? cp_over_m / n_mb : 0.0, cp_over_m, cp_over_m};
#else
  return {n_mb > 0 ? cp_over_m / n_mb : 0.0, global_aux ? l.dp() * cp_over_m : cp_over_m, cp_over_m};
#endif
}

}  // namespace moe::dist
