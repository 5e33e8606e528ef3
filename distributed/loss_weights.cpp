#include "distributed/loss_weights.hpp"

namespace moe::dist {

LossWeights loss_weights(const ModelConfig& c, LossMode mode, const ParallelLayout& l, int m, double n_mb,
                         double n_step) {
  const bool global_aux = c.layer.aux_loss_type == AuxLossType::global_aux;
  if (mode == LossMode::per_token) return {1.0, global_aux ? n_step : n_mb, n_mb};
  const double cp_over_m = static_cast<double>(l.cp) / m;
  return {n_mb > 0 ? cp_over_m / n_mb : 0.0, global_aux ? l.dp() * cp_over_m : cp_over_m, cp_over_m};
}

}  // namespace moe::dist
