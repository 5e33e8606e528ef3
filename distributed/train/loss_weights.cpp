#include "distributed/train/loss_weights.hpp"

namespace moe::dist {

LossWeights loss_weights(const ModelConfig& c, LossMode mode, const GroupSizes& sizes, int m,
                         const TokenCounts& loss_counts, const TokenCounts& router_counts) {
  const auto table = loss_scale_table(mode, sizes, m, c.semantics());
  const bool global_aux = c.layer.aux_loss_type == AuxLossType::global_aux;
  TokenCounts ce = loss_counts;
  const TokenCounts& n = router_counts;
  LossWeights w{loss_weight(loss_scale(table, LossTerm::ce), ce),
                loss_weight(loss_scale(table, global_aux ? LossTerm::global_aux : LossTerm::aux), n),
                loss_weight(loss_scale(table, LossTerm::z), n)};
  return w;
}

}  // namespace moe::dist
