// One MoE layer on one rank: router on the local (SP/CP-split) tokens, the chosen dispatcher around the local
// experts (ETP shards), the shared expert TP-sharded with a sequence-parallel gather / reduce-scatter, the
// optional gate and latent projections; forward and backward with the reverse communication.
//
//   u = x·latent_downᵀ (latent) | x          rows = dispatch(u, probs, map)        z = combine(experts(rows))
//   y = z·latent_upᵀ | z  +  σ(x·w_gᵀ) ⊙ RS_tp(F_s,shard(AG_tp(x)))
// One object per (layer, microbatch) use: it keeps what the backward needs.
#pragma once

#include "distributed/dispatch/dispatcher.hpp"
#include "distributed/train/expert_replication.hpp"
#include "distributed/train/expert_waves.hpp"
#include "distributed/kernels/fp8_rows.hpp"
#include "distributed/train/layer_shard.hpp"
#include "distributed/train/local_router.hpp"
#include "distributed/train/rank_groups.hpp"
#include "distributed/train/router_statistics.hpp"

#include <memory>

namespace moe::dist {

template <typename T>
class MoeLayerRank {
 public:
  // `kernels` does the data work (dispatch, experts, shared expert); it must outlive the layer, and so must
  // `replication` (null or empty: every expert computed by its owner only). expert_waves > 1: the routed experts
  // run wave-scheduled (expert_waves.hpp; the AlltoAll dispatcher only, without replicas or FP8 dispatch).
  MoeLayerRank(const MoeConfig& config, const LayerShard<T>& shard, const RankGroups& groups, DispatcherKind kind,
               const KernelBackend& kernels = cpu_kernels(), const ReplicationPlan* replication = nullptr,
               int expert_waves = 1);

  // x [n, h] local rows. Advances `global_aux` (global_aux layers).
  Matrix<T> forward(const Matrix<T>& x, const RouterInputs& router_inputs, const LocalTokens& tokens,
                    GlobalAuxCounts& global_aux);

  // dL/dx for L = ⟨dy, y⟩ + aux_weight·aux_share + z_weight·z_share; accumulates into `grads`.
  Matrix<T> backward(const Matrix<T>& dy, T aux_weight, T z_weight, LayerShard<T>& grads);

  T aux_share() const { return aux_.value; }
  // The wave-scheduled experts of this use (null unless expert_waves > 1 and forward ran).
  const ExpertWaves<T>* waves() const { return waves_.get(); }
  T z_share() const { return z_loss_.value; }
  // Real assignments per expert after dropping (padded tokens and slots excluded), this rank's tokens.
  const std::vector<std::int64_t>& assignments() const { return routing_.assignments; }
  // This rank's routing of the last forward: probabilities and map after capacity, its rows.
  const LocalRouting<T>& routing() const { return routing_; }

 private:
  void route_through_dispatcher();
  void backward_through_dispatcher(const Matrix<T>& dz, LayerShard<T>& grads, Matrix<T>& du, Matrix<T>& d_probs);

  const MoeConfig config_;  // by value: callers pass ModelConfig::layer_config(l), a temporary
  const LayerShard<T>& shard_;
  const RankGroups& groups_;
  DispatcherKind kind_;
  const KernelBackend& kernels_;
  const ReplicationPlan* replication_;
  std::unique_ptr<ExpertReplicas<T>> replicas_;  // this use's replicated experts, when the plan has any
  int expert_waves_;
  std::unique_ptr<ExpertWaves<T>> waves_;  // this use's waves, when expert_waves_ > 1

  Matrix<T> x_, u_, combined_;  // combined_ = z, the routed branch before latent_up
  LocalRouting<T> routing_;
  RouterLossShare<T> aux_, z_loss_;
  std::unique_ptr<Dispatcher<T>> dispatcher_;
  ExpertRows<T> rows_;
  // With FP8 dispatch, what the experts compute on: rows_ with each expert's rows padded to kFp8RowAlignment.
  ExpertRows<T> aligned_rows_;
  kernels::AlignedGroups aligned_;
  const ExpertRows<T>& expert_rows() const { return config_.fp8_dispatch ? aligned_rows_ : rows_; }
  Matrix<T> pre_;
  // Shared expert: tokens gathered over tp, per-rank row counts, its output after the reduce-scatter, gate.
  Matrix<T> shared_in_, shared_pre_, shared_out_;
  std::vector<std::int64_t> tp_rows_;
  Vector<T> gate_;
};

}  // namespace moe::dist
