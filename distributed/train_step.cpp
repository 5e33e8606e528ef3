#include "distributed/train_step.hpp"

#include "distributed/dense_ops.hpp"
#include "distributed/grad_sync.hpp"
#include "distributed/loss_weights.hpp"
#include "distributed/moe_layer_rank.hpp"
#include "distributed/row_collectives.hpp"

#include <cmath>
#include <memory>

namespace moe::dist {
namespace {

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

// Forward and backward of one microbatch on this rank; adds its weighted loss to `objective_share`.
void run_microbatch(const ModelConfig& c, const ModelShard<double>& shard, const LocalBatch& lb, int micro_batch,
                    const RankGroups& comms, const StepOptions& options, const LossWeights& w,
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
  const CrossEntropy ce = cross_entropy(normed * shard.head.transpose(), lb.labels, lb.padded, w.ce);
  objective_share += w.ce * ce.sum;
  const Matrix<double>& grad_logits = ce.grad_logits;

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
  synchronise_gradients(c, out.grads, first_expert, groups, comms, options.mode, global_tokens);
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
