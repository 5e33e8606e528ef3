#include "reference/global_step.hpp"

#include "reference/expert_bias.hpp"

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <string>

namespace moe {
namespace {

void require(bool ok, const std::string& rule) {
  if (!ok) throw std::invalid_argument("global step: " + rule);
}

void add_into(ModelParams<double>& sum, const ModelConfig& config, ModelParams<double> grads) {
  auto into = trained_tensors(config, sum);
  const auto from = trained_tensors(config, grads);
  for (size_t i = 0; i < into.size(); ++i)
    for (Eigen::Index j = 0; j < into[i].size; ++j) into[i].data[j] += from[i].data[j];
}

// The weights of N·J's terms: w with every weight times `scale`.
ModelLossWeights scaled(ModelLossWeights w, double scale) {
  for (double* v : {&w.ce, &w.aux, &w.z}) *v *= scale;
  for (auto* rows : {&w.ce_rows, &w.aux_rows, &w.mtp})
    for (double& v : *rows) v *= scale;
  for (auto& rows : w.mtp_rows)
    for (double& v : rows) v *= scale;
  return w;
}

// One step i: the microbatches of every replica, forward, with the per-layer global_aux state shared by all.
struct StepForward {
  std::vector<TokenBatch> batches;
  std::vector<ModelForward<double>> forwards;
};

StepForward forward_step(const ModelConfig& config, const ModelParams<double>& params, const GlobalBatch& batch,
                         const ParallelLayout& layout, int micro_batch, int index,
                         const std::vector<GlobalAuxState>& state) {
  const int dp = layout.dp_with_gtp();  // GTP peers take distinct samples, like dp ranks
  StepForward step;
  for (int r = 0; r < dp; ++r) step.batches.push_back(microbatch(batch, layout, micro_batch, r, index));
  if (config.layer.aux_loss_type != AuxLossType::global_aux) {
    for (const auto& b : step.batches) step.forwards.push_back(model_forward(config, params, b, state));
    return step;
  }
  // global_aux: a first pass finds every replica's aux-map counts (they depend on activations only), their sum
  // is the group's statistic for this step; the second pass evaluates each replica's share with it.
  std::vector<GlobalAuxGroup> group(static_cast<size_t>(config.num_blocks()));
  for (auto& g : group) g.counts.assign(static_cast<size_t>(config.layer.num_experts), 0.0);
  for (const auto& b : step.batches) {
    const auto f = model_forward(config, params, b, state);
    for (int l = 0; l < config.num_blocks(); ++l) {
      auto& g = group[static_cast<size_t>(l)];
      const auto& counts = f.layers[static_cast<size_t>(l)].aux_counts;
      for (size_t e = 0; e < counts.size(); ++e) g.counts[e] += static_cast<double>(counts[e]);
      // An MTP block's router sees the batch rolled by its depth (its padding mask rolled too).
      const TokenBatch& seen = l < config.num_layers ? b : rolled_batch(b, l - config.num_layers + 1);
      g.tokens += static_cast<double>(seen.router_tokens(config.semantics()));
    }
  }
  for (const auto& b : step.batches) step.forwards.push_back(model_forward(config, params, b, state, group));
  return step;
}

// Valid tokens of each part of the microbatch's source-rank partition (cp-major, then tp); with `all`, every token.
std::vector<double> part_tokens(const TokenBatch& b, bool all = false) {
  std::vector<double> n;
  for (const auto& part : b.partition) {
    double valid = 0;
    for (int t : part) valid += all || b.loss_mask(t % b.batch, t / b.batch);
    n.push_back(valid);
  }
  return n;
}

// The weights of microbatch b's per-row CE, Σ_l aux_l and Σ_l z_l in J (the header's formulas), n_total the global
// batch's valid tokens, step_tokens the router's tokens of step i over every replica. CE counts the loss mask; the
// router's terms count the tokens the router counts (all of them under router-counts-padding).
ModelLossWeights objective_weights(const ModelConfig& c, LossMode mode, const ParallelLayout& l, const TokenBatch& b,
                                   int m, double n_total, double step_tokens, const std::vector<double>& mtp_totals) {
  const Semantics& sem = c.semantics();
  const double dp = l.dp_with_gtp(), cp = l.cp, tp = l.tp;  // the replicas: dp ranks and their GTP peers
  const double n = static_cast<double>(b.valid_tokens());
  const double n_router = static_cast<double>(b.router_tokens(sem));
  const bool global_aux = c.layer.aux_loss_type == AuxLossType::global_aux;
  const std::vector<double> parts = part_tokens(b);
  const std::vector<double> router_parts = part_tokens(b, sem.has(Deviation::router_counts_padding));
  // Row weights that are constant on each part (one source rank): part p gets weight_of(p).
  const auto per_part = [&](auto weight_of) {
    std::vector<double> rows(static_cast<size_t>(b.tokens()), 0.0);
    for (size_t p = 0; p < b.partition.size(); ++p)
      for (int t : b.partition[p]) rows[static_cast<size_t>(t)] = weight_of(p);
    return rows;
  };
  ModelLossWeights w;
  // CP rank c holds parts [c·tp, (c+1)·tp): the valid tokens of each CP rank, from each part's.
  const auto per_cp_rank = [&](const std::vector<double>& part_counts) {
    std::vector<double> n_c(static_cast<size_t>(l.cp), 0.0);
    for (size_t p = 0; p < part_counts.size(); ++p) n_c[p / static_cast<size_t>(l.tp)] += part_counts[p];
    return n_c;
  };
  const double mtp_scale = c.mtp_depth > 0 ? c.mtp_loss_scale / c.mtp_depth : 0.0;
  for (int k = 1; k <= c.mtp_depth; ++k) {
    const TokenBatch rolled = rolled_batch(b, k);
    const double n_k = static_cast<double>(rolled.valid_tokens());
    const double total_k = mtp_totals[static_cast<size_t>(k - 1)];
    if (mode == LossMode::per_token) {
      w.mtp.push_back(total_k > 0 ? mtp_scale / total_k : 0.0);
      if (sem.has(Deviation::mtp_per_token_local_ratio)) {  // each CP rank: λ/D·N_c/Nᵏ_c, then ÷ N
        const std::vector<double> n_c = per_cp_rank(parts), nk_c = per_cp_rank(part_tokens(rolled));
        w.mtp_rows.push_back(per_part([&](size_t p) {
          const size_t rank = p / static_cast<size_t>(l.tp);
          return nk_c[rank] > 0 ? mtp_scale * n_c[rank] / nk_c[rank] / n_total : 0.0;
        }));
      }
    } else {
      w.mtp.push_back(n_k > 0 ? mtp_scale / (dp * m * n_k) : 0.0);
      if (sem.has(Deviation::ce_per_cp_rank)) {  // as the main CE: each CP rank over its own rolled tokens
        const std::vector<double> n_c = per_cp_rank(part_tokens(rolled));
        w.mtp_rows.push_back(per_part([&](size_t p) {
          const double n_cp = n_c[p / static_cast<size_t>(l.tp)];
          return n_cp > 0 ? mtp_scale / (dp * cp * m * n_cp) : 0.0;
        }));
      }
    }
  }
  if (mode == LossMode::per_token) {
    w.ce = 1.0 / n_total;
    w.z = n_router / n_total;
    // global_aux's step term is the group's loss (weight N_step); global-aux-dp-average weights it as aux.
    const bool like_aux = !global_aux || sem.has(Deviation::global_aux_dp_average);
    w.aux = (like_aux ? n_router : step_tokens) / n_total;
    if (like_aux && sem.has(Deviation::per_token_aux_group_tokens))  // every part counts its reduce group's tokens
      w.aux = (global_aux ? step_tokens : n_router) * tp * cp / n_total;
    else if (like_aux && sem.has(Deviation::per_token_aux_local_tokens))
      w.aux_rows = per_part([&](size_t p) { return router_parts[p] * tp * cp / n_total; });
    return w;
  }
  w.ce = n > 0 ? 1.0 / (dp * m * n) : 0.0;  // Megatron clamps the token count at 1; CE is 0 then
  if (sem.has(Deviation::ce_per_cp_rank)) {
    // Each CP rank divides by its own valid tokens N_c.
    const std::vector<double> cp_tokens = per_cp_rank(parts);
    w.ce_rows = per_part([&](size_t p) {
      const double n_c = cp_tokens[p / static_cast<size_t>(l.tp)];
      return n_c > 0 ? 1.0 / (dp * cp * m * n_c) : 0.0;
    });
  }
  w.aux = global_aux && !sem.has(Deviation::global_aux_dp_average) ? 1.0 / m : 1.0 / (dp * m);
  w.z = 1.0 / (dp * m);
  return w;
}

}  // namespace

// The one padding rule, shared by every caller (the CLI's --padding, Python's padded=): a position outside
// [0, seq) would be written before or after the loss_mask buffer, so each entry is checked before any write.
void check_padding(int seq, int size, const std::vector<int>& padded) {
  require(padded.empty() || static_cast<std::int64_t>(padded.size()) == size,
          "padded has " + std::to_string(padded.size()) + " entries for a batch of " + std::to_string(size) +
              " sequences (one entry per sequence, or none)");
  for (size_t b = 0; b < padded.size(); ++b)
    require(padded[b] >= 0 && padded[b] <= seq, "padded[" + std::to_string(b) + "] = " + std::to_string(padded[b]) +
                                                    " is outside [0, seq = " + std::to_string(seq) + "]");
}

GlobalBatch random_global_batch(const ModelConfig& config, int seq, int size, std::uint64_t seed,
                                const std::vector<int>& padded) {
  check_padding(seq, size, padded);
  const TokenBatch t = random_token_batch(config, seq, size, seed);
  GlobalBatch g{seq, size, t.input_ids, t.labels, t.loss_mask};
  for (size_t b = 0; b < padded.size(); ++b)
    for (int s = seq - padded[b]; s < seq; ++s) g.loss_mask(static_cast<Eigen::Index>(b), s) = false;
  return g;
}

std::vector<int> microbatch_sequences(int dp, int micro_batch, int replica, int index) {
  std::vector<int> seqs;
  for (int k = 0; k < micro_batch; ++k) seqs.push_back(index * micro_batch * dp + replica * micro_batch + k);
  return seqs;
}

std::vector<int> context_parallel_positions(int seq, int cp, int cp_rank) {
  require(seq % (2 * cp) == 0 || cp == 1, "seq must divide by 2·cp for load-balanced context parallelism");
  std::vector<int> positions;
  if (cp == 1) {
    for (int s = 0; s < seq; ++s) positions.push_back(s);
    return positions;
  }
  const int chunk = seq / (2 * cp);
  for (int c : {cp_rank, 2 * cp - 1 - cp_rank})
    for (int s = c * chunk; s < (c + 1) * chunk; ++s) positions.push_back(s);
  return positions;
}

std::vector<std::vector<int>> source_rank_partition(int seq, int micro_batch, int cp, int tp) {
  std::vector<std::vector<int>> parts;
  for (int c = 0; c < cp; ++c) {
    const std::vector<int> local = context_parallel_positions(seq, cp, c);
    require(static_cast<int>(local.size()) % tp == 0, "the context-parallel shard must divide by tp for SP");
    const int slice = static_cast<int>(local.size()) / tp;
    for (int j = 0; j < tp; ++j) {
      std::vector<int> rows;
      for (int k = j * slice; k < (j + 1) * slice; ++k)
        for (int b = 0; b < micro_batch; ++b) rows.push_back(local[static_cast<size_t>(k)] * micro_batch + b);
      parts.push_back(std::move(rows));
    }
  }
  return parts;
}

// gtp-factor-missing (the Megatron profiles): without PR #7165's egtp/gtp pre-scale the synchronised routed-expert
// gradients are those of J times (the expert row's net factor as Megatron has it) / (the intended one), gtp/egtp in
// sum mode. The factor comes from the scaling table, the same rows the parallel system synchronises with.
static void scale_expert_grads(const ModelConfig& config, const ParallelLayout& layout, LossMode mode,
                        ModelParams<double>& grads) {
  if (!config.semantics().has(Deviation::gtp_factor_missing) || layout.gtp == layout.egtp) return;
  const GroupSizes sizes = group_sizes(ProcessGroups(layout));
  const double as_run = sync_rule(grad_sync_table(mode, sizes, false, config.semantics()), ParamClass::expert).net_factor;
  const double intended = sync_rule(grad_sync_table(mode, sizes, false), ParamClass::expert).net_factor;
  if (as_run == intended) return;
  const auto scale = [&](std::vector<Matrix<double>>& experts) {
    for (Matrix<double>& w : experts) w *= as_run / intended;
  };
  for (auto& layer : grads.layers) {  // MTP blocks included
    scale(layer.expert_fc1);
    scale(layer.expert_fc2);
  }
}

TokenBatch microbatch(const GlobalBatch& batch, const ParallelLayout& layout, int micro_batch, int replica, int index) {
  TokenBatch t;
  t.seq = batch.seq;
  t.batch = micro_batch;
  t.input_ids.resize(micro_batch, batch.seq);
  t.labels.resize(micro_batch, batch.seq);
  t.loss_mask.resize(micro_batch, batch.seq);
  const auto seqs = microbatch_sequences(layout.dp_with_gtp(), micro_batch, replica, index);
  for (int k = 0; k < micro_batch; ++k) {
    t.input_ids.row(k) = batch.input_ids.row(seqs[static_cast<size_t>(k)]);
    t.labels.row(k) = batch.labels.row(seqs[static_cast<size_t>(k)]);
    t.loss_mask.row(k) = batch.loss_mask.row(seqs[static_cast<size_t>(k)]);
  }
  t.partition = source_rank_partition(batch.seq, micro_batch, layout.cp, layout.tp);
  return t;
}

GlobalStep global_step(const ModelConfig& model, const ModelParams<double>& main_params, const GlobalBatch& batch,
                       const ParallelLayout& layout, int micro_batch, LossMode mode) {
  // Under bf16 storage the step computes with a bf16 copy of the main parameters (model.hpp bf16_weights).
  std::optional<ModelParams<double>> rounded;
  const ModelParams<double>& params =
      model.layer.bf16_storage ? rounded.emplace(bf16_weights(model, main_params)) : main_params;
  model.validate();
  layout.validate();
  require(batch.input_ids.rows() == batch.size && batch.input_ids.cols() == batch.seq, "input_ids must be [B, S]");
  const ModelConfig config = model.in_mode(mode);
  GlobalStep out;
  out.num_microbatches = num_microbatches(layout, batch.size, micro_batch);
  out.valid_tokens = batch.loss_mask.cast<std::int64_t>().sum();
  require(mode != LossMode::per_token || out.valid_tokens > 0, "per-token loss needs at least one valid token");
  const int dp = layout.dp_with_gtp();
  const int m = out.num_microbatches;
  const bool global_aux = config.layer.aux_loss_type == AuxLossType::global_aux;
  const double n_total = static_cast<double>(out.valid_tokens);
  // Per-token loss divides the gradients by the step's valid tokens N after the backward (Megatron's
  // finalize_model_grads), so the backward runs on N·J: under bf16 storage the gradients stored on the way are
  // those of N·J, as in a run. In double the two orders agree to rounding.
  const double backward_scale = mode == LossMode::per_token ? n_total : 1.0;

  // The valid tokens each MTP depth predicts over the whole batch (its per-token normalisation).
  std::vector<double> mtp_totals;
  for (int k = 1; k <= config.mtp_depth; ++k)
    mtp_totals.push_back(static_cast<double>(batch.loss_mask.rightCols(std::max(batch.seq - k, 0)).cast<std::int64_t>().sum()));

  std::vector<GlobalAuxState> state(static_cast<size_t>(config.num_blocks()));
  out.bias_counts.assign(static_cast<size_t>(config.num_blocks()),
                         std::vector<std::int64_t>(static_cast<size_t>(config.layer.num_experts), 0));
  out.ce_weights = Matrix<double>::Zero(batch.size, batch.seq);
  bool have_grads = false;

  for (int i = 0; i < m; ++i) {
    const StepForward step = forward_step(config, params, batch, layout, micro_batch, i, state);
    double step_tokens = 0;
    for (const auto& b : step.batches) step_tokens += static_cast<double>(b.router_tokens(config.semantics()));

    for (int r = 0; r < dp; ++r) {
      const TokenBatch& b = step.batches[static_cast<size_t>(r)];
      const ModelForward<double>& f = step.forwards[static_cast<size_t>(r)];
      const ModelLossWeights w = objective_weights(config, mode, layout, b, m, n_total, step_tokens, mtp_totals);
      const auto sequences = microbatch_sequences(dp, micro_batch, r, i);
      for (Eigen::Index t = 0; t < b.tokens(); ++t) {
        const double wt = w.ce_rows.empty() ? w.ce : w.ce_rows[static_cast<size_t>(t)];
        out.ce_term += wt * f.ce_rows(t);
        if (b.loss_mask(t % micro_batch, t / micro_batch))
          out.ce_weights(sequences[static_cast<size_t>(t % micro_batch)], t / micro_batch) = wt;
      }
      if (w.aux_rows.empty()) {
        out.aux_term += w.aux * f.aux_sum;
      } else {
        for (const auto& layer : f.layers)
          for (Eigen::Index t = 0; t < layer.aux_rows.size(); ++t) out.aux_term += w.aux_rows[size_t(t)] * layer.aux_rows(t);
      }
      out.z_term += w.z * f.z_sum;
      for (size_t k = 0; k < f.mtp.size(); ++k)
        for (Eigen::Index t = 0; t < b.tokens(); ++t)
          out.mtp_term += (w.mtp_rows.empty() ? w.mtp[k] : w.mtp_rows[k][static_cast<size_t>(t)]) * f.mtp[k].ce_rows(t);
      ModelParams<double> g = model_backward(config, params, b, f, scaled(w, backward_scale));
      if (!have_grads) {
        out.grads = std::move(g);
        have_grads = true;
      } else {
        add_into(out.grads, config, std::move(g));
      }
      for (int l = 0; l < config.num_blocks(); ++l) {
        const auto& counts = f.layers[static_cast<size_t>(l)].routing.bias_counts;
        for (size_t e = 0; e < counts.size(); ++e) out.bias_counts[static_cast<size_t>(l)][e] += counts[e];
      }
    }
    if (global_aux)
      for (int l = 0; l < config.num_blocks(); ++l)
        state[static_cast<size_t>(l)] = step.forwards.front().layers[static_cast<size_t>(l)].global_aux;
  }
  out.objective = out.ce_term + out.aux_term + out.z_term + out.mtp_term;
  out.global_aux = state;
  if (backward_scale != 1.0)
    for (const TensorView<double>& t : trained_tensors(config, out.grads))
      for (Eigen::Index j = 0; j < t.size; ++j) t.data[j] /= backward_scale;
  scale_expert_grads(config, layout, mode, out.grads);

  for (int l = 0; l < config.num_blocks(); ++l) {
    const MoeConfig lc = config.layer_config(l);
    const auto li = static_cast<size_t>(l);
    out.expert_bias_updated.push_back(
        lc.bias_update_rate ? updated_expert_bias(params.layers[li].expert_bias, out.bias_counts[li],
                                                  *lc.bias_update_rate)
                            : Vector<double>());
  }
  return out;
}

}  // namespace moe
