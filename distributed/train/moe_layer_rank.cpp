#include "distributed/train/moe_layer_rank.hpp"

#include "distributed/comm/row_collectives.hpp"
#include "distributed/kernels/fp8_rows.hpp"
#include "reference/bf16.hpp"

#include <stdexcept>
#include <string>

namespace moe::dist {
namespace {

template <typename T>
kernels::SwigluOptions routed_options(const MoeConfig& c) {
  return {c.routed_clamp(), c.apply_probs_on_input, c.bf16_storage, c.clamp_limit_passes()};
}

template <typename T>
kernels::SwigluOptions shared_options(const MoeConfig& c) {
  return {c.shared_clamp(), false, c.bf16_storage, c.clamp_limit_passes()};
}

template <typename T>
kernels::ExpertShards<T> one_expert(const Matrix<T>& fc1, const Matrix<T>& fc2) {
  return {{fc1}, {fc2}};
}

}  // namespace

template <typename T>
MoeLayerRank<T>::MoeLayerRank(const MoeConfig& config, const LayerShard<T>& shard, const RankGroups& groups,
                              DispatcherKind kind, const KernelBackend& kernels, const ReplicationPlan* replication,
                              int expert_waves)
    : config_(config),
      shard_(shard),
      groups_(groups),
      kind_(kind),
      kernels_(kernels),
      replication_(replication && !replication->empty() ? replication : nullptr),
      expert_waves_(expert_waves) {
  if (expert_waves < 1) throw std::invalid_argument("expert waves must be ≥ 1, not " + std::to_string(expert_waves));
  if (expert_waves > 1) {
    const std::string why = kind != DispatcherKind::alltoall
                                ? "the " + std::string(to_string(kind)) + " dispatcher (it sums a token's rows on the " +
                                      "expert side before the return, so waves could not keep the unwaved sums)"
                            : replication_       ? "replicated experts"
                            : config.fp8_dispatch ? "FP8 dispatch"
                                                  : "";
    if (!why.empty())
      throw std::invalid_argument("wave-scheduled experts run with the AlltoAll dispatcher, not with " + why);
  }
  if (!replication_) return;
  if (groups.expt_tp->size() != 1)
    throw std::invalid_argument("replicated experts need ETP 1 (as HybridEP's virtual experts): etp is " +
                                std::to_string(groups.expt_tp->size()));
  if (config.fp8_dispatch) throw std::invalid_argument("replicated experts do not run with FP8 dispatch");
}

template <typename T>
Matrix<T> MoeLayerRank<T>::forward(const Matrix<T>& x, const RouterInputs& router_inputs, const LocalTokens& tokens,
                                   GlobalAuxCounts& global_aux) {
  const MoeConfig& c = config_;
  x_ = x;
  routing_ = route_local(c, x, shard_.router_weight, shard_.expert_bias, shard_.tid2eid, router_inputs);
  if (c.aux_loss_type != AuxLossType::none)
    aux_ = aux_loss_share(c, routing_.logits, routing_.scores, tokens, groups_.statistics(), global_aux);
  if (c.z_loss_coeff > 0) z_loss_ = z_loss_share(c, routing_.logits, tokens, *groups_.tp_cp);

  // Routed branch.
  u_ = c.latent_size > 0 ? stored(c.bf16_storage, Matrix<T>(x * shard_.latent_down.transpose())) : x;
  // FP8 dispatch: cast at the source to e4m3 codes and tile scales (what the wire would carry) and back; the backward
  // passes gradients straight through.
  if (c.fp8_dispatch) u_ = kernels::fp8_dequantise_rows(kernels::fp8_quantise_rows(u_));
  if (expert_waves_ > 1) {
    waves_ = std::make_unique<ExpertWaves<T>>(expert_waves_, groups_.dispatch(), c.num_experts, kernels_,
                                              routed_options<T>(c));
    combined_ = waves_->forward(u_, routing_.probs, routing_.routing_map, shard_.experts);
  } else {
    route_through_dispatcher();
  }
  Matrix<T> y = c.latent_size > 0 ? Matrix<T>(combined_ * shard_.latent_up.transpose()) : combined_;

  // Shared expert, TP-sharded over the sequence-parallel tokens of the tp group.
  if (c.has_shared_expert()) {
    tp_rows_ = allgather_count(*groups_.tp, x.rows());
    shared_in_ = allgatherv_rows(*groups_.tp, x, tp_rows_);
    const Vector<T> ones = Vector<T>::Ones(shared_in_.rows());
    auto shared = kernels_.grouped_swiglu_forward(shared_in_, {shared_in_.rows()},
                                                  one_expert(shard_.shared_fc1, shard_.shared_fc2), ones,
                                                  shared_options<T>(c));
    shared_pre_ = std::move(shared.pre);
    shared_out_ = reduce_scatterv_rows(*groups_.tp, shared.y, tp_rows_);
    gate_ = c.shared_expert_gate
                ? Vector<T>((T(1) + (-(x * shard_.shared_gate.transpose()).array()).exp()).inverse().matrix())
                : Vector<T>::Ones(x.rows());
    y += (shared_out_.array().colwise() * gate_.array()).matrix();
  }
  return stored(c.bf16_storage, std::move(y));
}

// Dispatch u_, run the experts (with their replicas) and combine into combined_.
template <typename T>
void MoeLayerRank<T>::route_through_dispatcher() {
  const MoeConfig& c = config_;
  dispatcher_ = make_dispatcher<T>(kind_, groups_.dispatch(), c.num_experts, kernels_);
  rows_ = dispatcher_->dispatch(u_, routing_.probs, routing_.routing_map);
  if (c.fp8_dispatch) {  // the FP8 GEMM's row alignment: zero rows of probability 0 after each expert's rows
    aligned_ = kernels::align_groups(rows_.group_sizes, kernels::kFp8RowAlignment);
    aligned_rows_.x = kernels_.scatter_add_rows(rows_.x, aligned_.position, aligned_.rows);
    aligned_rows_.probs = Vector<T>::Zero(aligned_.rows);
    aligned_rows_.probs(aligned_.position) = rows_.probs;
    aligned_rows_.group_sizes = aligned_.group_sizes;
  }
  const ExpertRows<T>& in = expert_rows();
  if (replication_) {
    replicas_ = std::make_unique<ExpertReplicas<T>>(*replication_, *groups_.ep, c.num_experts, kernels_,
                                                    routed_options<T>(c));
    combined_ = dispatcher_->combine(replicas_->forward(in, shard_.experts));
  } else {
    auto experts = kernels_.grouped_swiglu_forward(in.x, in.group_sizes, shard_.experts, in.probs,
                                                   routed_options<T>(c));
    pre_ = std::move(experts.pre);
    combined_ = dispatcher_->combine(c.fp8_dispatch ? kernels_.gather_rows(experts.y, aligned_.position) : experts.y);
  }
}

template <typename T>
Matrix<T> MoeLayerRank<T>::backward(const Matrix<T>& dy, T aux_weight, T z_weight, LayerShard<T>& grads) {
  const MoeConfig& c = config_;
  Matrix<T> dx = Matrix<T>::Zero(x_.rows(), x_.cols());

  if (c.has_shared_expert()) {
    const Matrix<T> d_out = (dy.array().colwise() * gate_.array()).matrix();
    const Matrix<T> d_gathered = allgatherv_rows(*groups_.tp, d_out, tp_rows_);
    const Vector<T> ones = Vector<T>::Ones(shared_in_.rows());
    kernels::ExpertShards<T> g = one_expert(grads.shared_fc1, grads.shared_fc2);
    const auto b = kernels_.grouped_swiglu_backward(shared_in_, {shared_in_.rows()},
                                                    one_expert(shard_.shared_fc1, shard_.shared_fc2), ones,
                                                    shared_options<T>(c), shared_pre_, d_gathered, g);
    grads.shared_fc1 = g.fc1[0];
    grads.shared_fc2 = g.fc2[0];
    dx += reduce_scatterv_rows(*groups_.tp, b.dx, tp_rows_);
    if (c.shared_expert_gate) {
      // d/d(gate logit) = ⟨dy, F_s⟩·σ(1 − σ)
      const Vector<T> d_logit = ((dy.array() * shared_out_.array()).rowwise().sum() * gate_.array() *
                                 (T(1) - gate_.array())).matrix();
      grads.shared_gate += d_logit.transpose() * x_;
      dx += d_logit * shard_.shared_gate;
    }
  }

  const Matrix<T> dz = c.latent_size > 0 ? stored(c.bf16_storage, Matrix<T>(dy * shard_.latent_up)) : dy;
  if (c.latent_size > 0) grads.latent_up += dy.transpose() * combined_;
  Matrix<T> du, d_probs;
  if (waves_)
    waves_->backward(dz, shard_.experts, grads.experts, du, d_probs);
  else
    backward_through_dispatcher(dz, grads, du, d_probs);
  if (c.latent_size > 0) {
    grads.latent_down += du.transpose() * x_;
    dx += du * shard_.latent_down;
  } else {
    dx += du;
  }

  Matrix<T> d_logits = route_local_backward(c, routing_, d_probs);
  if (c.aux_loss_type != AuxLossType::none) d_logits += aux_weight * aux_.grad_logits;
  if (c.z_loss_coeff > 0) d_logits += z_weight * z_loss_.grad_logits;
  grads.router_weight += d_logits.transpose() * x_;
  dx += d_logits * shard_.router_weight;
  return stored(c.bf16_storage, std::move(dx));
}

template <typename T>
void MoeLayerRank<T>::backward_through_dispatcher(const Matrix<T>& dz, LayerShard<T>& grads, Matrix<T>& du,
                                                  Matrix<T>& d_probs) {
  const MoeConfig& c = config_;
  Matrix<T> d_rows = dispatcher_->combine_backward(dz);
  if (c.fp8_dispatch) d_rows = kernels_.scatter_add_rows(d_rows, aligned_.position, aligned_.rows);
  const ExpertRows<T>& in = expert_rows();
  auto eb = replicas_ ? replicas_->backward(d_rows, shard_.experts, grads.experts)
                     : kernels_.grouped_swiglu_backward(in.x, in.group_sizes, shard_.experts, in.probs,
                                                        routed_options<T>(c), pre_, d_rows, grads.experts);
  if (c.fp8_dispatch) {  // strip the alignment rows again
    eb.dx = kernels_.gather_rows(eb.dx, aligned_.position);
    eb.dprob = Vector<T>(eb.dprob(aligned_.position));
  }
  dispatcher_->dispatch_backward(eb.dx, eb.dprob, du, d_probs);
}

template class MoeLayerRank<double>;
template class MoeLayerRank<float>;

}  // namespace moe::dist
