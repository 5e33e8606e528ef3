#include "distributed/train_step.hpp"

#include "distributed/moe_layer_rank.hpp"
#include "distributed/row_collectives.hpp"

#include <cmath>
#include <memory>

namespace moe::dist {
namespace {

using Array = Eigen::Array<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// RMSNorm of every row at once: y = x·r ⊙ w, r = 1/sqrt(mean(x²) + eps).
Matrix<double> rms_norm_rows(const Matrix<double>& x, const Vector<double>& w, double eps) {
  const Vector<double> r = ((x.array().square().rowwise().sum() / static_cast<double>(x.cols())) + eps).rsqrt();
  return ((x.array().colwise() * r.array()).rowwise() * w.transpose().array()).matrix();
}

// dx = r·(dx̂ − x̂·mean(dx̂ ⊙ x̂)), dx̂ = dy ⊙ w, x̂ = x·r; dw += Σ_rows dy ⊙ x̂.
Matrix<double> rms_norm_rows_backward(const Matrix<double>& x, const Vector<double>& w, double eps,
                                      const Matrix<double>& dy, Vector<double>& dw) {
  const auto n = static_cast<double>(x.cols());
  const Vector<double> r = ((x.array().square().rowwise().sum() / n) + eps).rsqrt();
  const Array x_hat = x.array().colwise() * r.array();
  dw += (dy.array() * x_hat).colwise().sum().matrix().transpose();
  const Array dx_hat = dy.array().rowwise() * w.transpose().array();
  const Vector<double> mean = (dx_hat * x_hat).rowwise().sum() / n;
  return ((dx_hat - x_hat.colwise() * mean.array()).colwise() * r.array()).matrix();
}

// This rank's rows of one microbatch: ids, labels, validity and sequence index, in local order.
struct LocalBatch {
  IndexVector ids, labels;
  std::vector<bool> padded;
  std::vector<int> sequence;
  std::int64_t valid = 0;
};

LocalBatch local_batch(const TokenBatch& tb, const std::vector<int>& rows) {
  LocalBatch lb;
  const auto n = static_cast<Eigen::Index>(rows.size());
  lb.ids.resize(n);
  lb.labels.resize(n);
  for (Eigen::Index k = 0; k < n; ++k) {
    const int t = rows[static_cast<size_t>(k)];
    const int s = t / tb.batch, b = t % tb.batch;
    lb.ids(k) = tb.input_ids(b, s);
    lb.labels(k) = tb.labels(b, s);
    lb.padded.push_back(!tb.loss_mask(b, s));
    lb.sequence.push_back(b);
    lb.valid += tb.loss_mask(b, s);
  }
  return lb;
}

double all_sum(Communicator& comm, double value) {
  comm.allreduce<double>(std::span<double>(&value, 1), ReduceOp::sum);
  return value;
}

struct Weights {
  double ce, aux, z;
};

Weights loss_weights(const ModelConfig& c, LossMode mode, const ParallelLayout& l, int m, double n_mb,
                     double n_step) {
  const bool global_aux = c.layer.aux_loss_type == AuxLossType::global_aux;
  if (mode == LossMode::per_token) return {1.0, global_aux ? n_step : n_mb, n_mb};
  const double cp_over_m = static_cast<double>(l.cp) / m;
  return {n_mb > 0 ? cp_over_m / n_mb : 0.0, global_aux ? l.dp() * cp_over_m : cp_over_m, cp_over_m};
}

// Forward and backward of one microbatch on this rank; adds its weighted loss to `objective_share`.
void run_microbatch(const ModelConfig& c, const ModelShard<double>& shard, const LocalBatch& lb, int micro_batch,
                    const RankGroups& comms, const StepOptions& options, const Weights& w,
                    std::vector<GlobalAuxCounts>& global_aux, ModelShard<double>& grads,
                    std::vector<std::vector<std::int64_t>>& assignments, double& objective_share) {
  const Eigen::Index n = lb.ids.size();
  const int h = c.layer.hidden;
  Matrix<double> hidden(n, h);
  for (Eigen::Index k = 0; k < n; ++k) hidden.row(k) = shard.embedding.row(lb.ids(k));

  std::vector<Matrix<double>> block_in;
  std::vector<std::unique_ptr<MoeLayerRank<double>>> layers;
  for (int l = 0; l < c.num_layers; ++l) {
    const auto li = static_cast<size_t>(l);
    block_in.push_back(hidden);
    layers.push_back(std::make_unique<MoeLayerRank<double>>(c.layer_config(l), shard.layers[li], comms,
                                                             options.dispatcher));
    const RouterInputs router{lb.ids, lb.padded};
    const LocalTokens tokens{lb.padded, lb.sequence, micro_batch};
    hidden += layers.back()->forward(rms_norm_rows(hidden, shard.block_norm[li], c.rms_eps), router, tokens,
                                     global_aux[li]);
    objective_share += w.aux * layers.back()->aux_share() + w.z * layers.back()->z_share();
    const auto& a = layers.back()->assignments();
    for (size_t e = 0; e < a.size(); ++e) assignments[li][e] += a[e];
  }

  const Matrix<double> normed = rms_norm_rows(hidden, shard.final_norm, c.rms_eps);
  const Matrix<double> logits = normed * shard.head.transpose();
  // Cross-entropy of the valid local tokens and its gradient w_ce·(softmax − onehot).
  const Vector<double> max = logits.rowwise().maxCoeff();
  Matrix<double> grad_logits = (logits.colwise() - max).array().exp().matrix();
  const Vector<double> sums = grad_logits.rowwise().sum();
  for (Eigen::Index k = 0; k < n; ++k) {
    if (lb.padded[static_cast<size_t>(k)]) {
      grad_logits.row(k).setZero();
      continue;
    }
    objective_share += w.ce * (max(k) + std::log(sums(k)) - logits(k, lb.labels(k)));
    grad_logits.row(k) /= sums(k);
    grad_logits(k, lb.labels(k)) -= 1.0;
  }
  grad_logits *= w.ce;

  grads.head += grad_logits.transpose() * normed;
  Matrix<double> d_hidden =
      rms_norm_rows_backward(hidden, shard.final_norm, c.rms_eps, grad_logits * shard.head, grads.final_norm);
  for (int l = c.num_layers - 1; l >= 0; --l) {
    const auto li = static_cast<size_t>(l);
    const Matrix<double> dx = layers[li]->backward(d_hidden, w.aux, w.z, grads.layers[li]);
    d_hidden += rms_norm_rows_backward(block_in[li], shard.block_norm[li], c.rms_eps, dx, grads.block_norm[li]);
  }
  for (Eigen::Index k = 0; k < n; ++k) grads.embedding.row(lb.ids(k)) += d_hidden.row(k);
}

// Gradient synchronisation by the scaling table: pre-scale, the data-parallel collective of the parameter's
// class, the extra SUM over tp for sequence-parallel params, and the per-token division.
void synchronise(const ModelConfig& c, ModelShard<double>& grads, int first_expert, const ProcessGroups& groups,
                 const RankGroups& comms, LossMode mode, double global_tokens) {
  const auto table = grad_sync_table(mode, group_sizes(groups), false);
  for (auto& t : shard_tensors(c, grads, first_expert)) {
    const GradSync* sync = nullptr;
    for (const auto& row : table)
      if (row.rule.param_class == t.param_class) sync = &row;
    std::span<double> data(t.data, static_cast<size_t>(t.size));
    for (double& v : data) v *= sync->prescale;
    Communicator& dp_group = sync->rule.group == GroupKind::expt_dp ? *comms.expt_dp : *comms.dp_cp;
    dp_group.allreduce<double>(data, sync->rule.op == SyncOp::avg ? ReduceOp::avg : ReduceOp::sum);
    if (sync->rule.then_sum_over_tp) comms.tp->allreduce<double>(data, ReduceOp::sum);
    if (sync->rule.divide_by_global_tokens)
      for (double& v : data) v /= global_tokens;
  }
}

}  // namespace

RankStep train_step(const ModelConfig& c, const ModelShard<double>& shard, const GlobalBatch& batch,
                    const ProcessGroups& groups, const RankGroups& comms, const StepOptions& options) {
  const ParallelLayout& l = groups.layout();
  const int rank = comms.rank;
  const int m = num_microbatches(l, batch.size, options.micro_batch);
  const int dp_rank = groups.rank_in(GroupKind::dp, rank);
  const int source = groups.rank_in(GroupKind::cp, rank) * l.tp + groups.rank_in(GroupKind::tp, rank);
  const auto experts = static_cast<size_t>(c.layer.num_experts);

  RankStep out;
  out.grads = zeros_like(shard);
  std::vector<GlobalAuxCounts> global_aux(static_cast<size_t>(c.num_layers));
  std::vector<std::vector<std::int64_t>> assignments(static_cast<size_t>(c.num_layers),
                                                     std::vector<std::int64_t>(experts, 0));
  double objective_share = 0, local_valid = 0;
  for (int i = 0; i < m; ++i) {
    const TokenBatch tb = microbatch(batch, l, options.micro_batch, dp_rank, i);
    const LocalBatch lb = local_batch(tb, tb.partition[static_cast<size_t>(source)]);
    const double n_mb = all_sum(*comms.tp_cp, static_cast<double>(lb.valid));
    const double n_step = all_sum(*comms.tp_dp_cp, static_cast<double>(lb.valid));
    local_valid += static_cast<double>(lb.valid);
    run_microbatch(c, shard, lb, options.micro_batch, comms, options, loss_weights(c, options.mode, l, m, n_mb, n_step),
                   global_aux, out.grads, assignments, objective_share);
  }

  const double global_tokens = all_sum(*comms.tp_dp_cp, local_valid);
  const int first_expert = groups.experts_of(rank, c.layer.num_experts).first;
  synchronise(c, out.grads, first_expert, groups, comms, options.mode, global_tokens);
  out.objective = all_sum(*comms.tp_dp_cp, objective_share) /
                  (options.mode == LossMode::per_token ? global_tokens : static_cast<double>(l.dp() * l.cp));

  // Expert bias: real assignments over tp×dp×cp and the whole batch, then β + rate·sign(mean − c).
  for (int layer = 0; layer < c.num_layers; ++layer) {
    auto& counts = assignments[static_cast<size_t>(layer)];
    comms.tp_dp_cp->allreduce<std::int64_t>(counts, ReduceOp::sum);
    out.bias_counts.push_back(counts);
    const MoeConfig lc = c.layer_config(layer);
    Vector<double> bias;
    if (lc.bias_update_rate) {
      bias = shard.layers[static_cast<size_t>(layer)].expert_bias;
      const Vector<double> load = Eigen::Map<const IndexVector>(counts.data(), static_cast<Eigen::Index>(counts.size()))
                                      .cast<double>();
      bias.array() += *lc.bias_update_rate * (load.mean() - load.array()).sign();
    }
    out.expert_bias_updated.push_back(bias);
  }
  return out;
}

}  // namespace moe::dist
