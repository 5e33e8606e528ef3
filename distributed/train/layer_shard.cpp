#include "distributed/train/layer_shard.hpp"

#include <stdexcept>
#include <string>

namespace moe::dist {
namespace {

// Slice `part` of `parts` of a SwiGLU of width d: fc1 keeps its gate and up rows paired, fc2 the columns.
template <typename T>
void slice_swiglu(const Matrix<T>& fc1, const Matrix<T>& fc2, int parts, int part, Matrix<T>& fc1_out,
                  Matrix<T>& fc2_out) {
  const auto d = fc2.cols();
  const auto dl = d / parts;
  fc1_out.resize(2 * dl, fc1.cols());
  fc1_out.topRows(dl) = fc1.middleRows(part * dl, dl);
  fc1_out.bottomRows(dl) = fc1.middleRows(d + part * dl, dl);
  fc2_out = fc2.middleCols(part * dl, dl);
}

}  // namespace

template <typename T>
LayerShard<T> shard_layer(const MoeConfig& c, const MoeParams<T>& global, const ProcessGroups& groups, int rank) {
  const ParallelLayout& l = groups.layout();
  check_layer_sharding(c, l);
  LayerShard<T> s;
  s.router_weight = global.router_weight;
  s.expert_bias = global.expert_bias;
  s.tid2eid = global.tid2eid;
  s.shared_gate = global.shared_gate;
  s.latent_down = global.latent_down;
  s.latent_up = global.latent_up;

  const ExpertRange experts = groups.experts_of(rank, c.num_experts);
  const int etp_rank = groups.rank_in(GroupKind::expt_tp, rank);
  for (int i = 0; i < experts.count; ++i) {
    const auto e = static_cast<size_t>(experts.first + i);
    s.experts.fc1.emplace_back();
    s.experts.fc2.emplace_back();
    slice_swiglu(global.expert_fc1[e], global.expert_fc2[e], l.etp, etp_rank, s.experts.fc1.back(),
                 s.experts.fc2.back());
  }
  if (c.has_shared_expert())
    slice_swiglu(global.shared_fc1, global.shared_fc2, l.tp, groups.rank_in(GroupKind::tp, rank), s.shared_fc1,
                 s.shared_fc2);
  return s;
}

template LayerShard<double> shard_layer<double>(const MoeConfig&, const MoeParams<double>&, const ProcessGroups&, int);
template LayerShard<float> shard_layer<float>(const MoeConfig&, const MoeParams<float>&, const ProcessGroups&, int);

}  // namespace moe::dist
