#include "distributed/train/train_step.hpp"

#include "distributed/comm/row_collectives.hpp"
#include "distributed/train/attention_rank.hpp"
#include "distributed/train/dense_ops.hpp"
#include "distributed/train/grad_sync.hpp"
#include "distributed/train/loss_weights.hpp"
#include "distributed/train/moe_layer_rank.hpp"
#include "distributed/train/mtp_rank.hpp"
#include "distributed/train/pipeline_schedule.hpp"
#include "reference/bf16.hpp"

#include <algorithm>
#include <map>
#include <type_traits>
#include <memory>
#include <optional>

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

// Tags of the point-to-point messages between stages: one per boundary (between virtual stage b and b + 1),
// microbatch and direction. With an interleaved pipeline two ranks share several boundaries.
int boundary_tag(int boundary, int microbatches, int microbatch, bool gradient) {
  const long long tag = 2LL * (1LL * boundary * microbatches + microbatch) + (gradient ? 1 : 0);
  if (tag > Communicator::max_tag)
    throw std::invalid_argument("pipeline: " + std::to_string(microbatches) + " microbatches over this many (virtual) "
                                "stages need more message tags than a communicator has (" +
                                std::to_string(Communicator::max_tag) + ")");
  return static_cast<int>(tag);
}

// What one microbatch leaves on this stage between its forward and its backward.
template <typename T>
struct InFlight {
  LocalBatch batch;
  LossWeights weights{};
  std::vector<Matrix<T>> block_in;      // each layer's residual stream entering the MoE's norm
  std::vector<std::unique_ptr<MoeLayerRank<T>>> layers;
  std::vector<Matrix<T>> attention_in;  // with attention: each layer's residual stream entering the attention's norm
  std::vector<std::unique_ptr<AttentionRank>> attention;
  Matrix<T> out;          // the stage's output activation (last stage: before the final norm)
  Matrix<T> grad_logits;  // last stage only
  std::vector<std::unique_ptr<MtpDepthRank<T>>> mtp;  // last stage, with multi-token prediction
};

// The stage's share of the step: the layers of each of its model chunks for every microbatch, in the order of
// the schedule, accumulating gradients into `grads` (the shapes of the shard). Chunk c is virtual stage
// c·pp + stage; its input comes from the rank before (pp rank 0: from the last rank's chunk c − 1).
template <typename T>
class StageRunner {
 public:
  StageRunner(const ModelConfig& c, const ModelShard<T>& shard, const GlobalBatch& batch, const ProcessGroups& groups,
              const RankGroups& comms, const StepOptions& options, ModelShard<T>& grads)
      : c_(c), shard_(shard), batch_(batch), groups_(groups), comms_(comms), options_(options), grads_(grads) {
    const ParallelLayout& l = groups.layout();
    m_ = num_microbatches(l, batch.size, options.micro_batch);
    sizes_ = group_sizes(groups);
    replica_ = groups.rank_in(GroupKind::dp_gtp, comms.rank);  // the replica: GTP peers take distinct samples
    source_ = groups.rank_in(GroupKind::cp, comms.rank) * l.tp + groups.rank_in(GroupKind::tp, comms.rank);
    stage_ = groups.rank_in(GroupKind::pp, comms.rank);
    pp_ = l.pp;
    bf16_ = c.layer.bf16_storage;
    virtual_stages_ = l.pp * static_cast<int>(shard.chunks.size());
    objective_shares_.assign(shard.chunks.size(), 0.0);
    // Per block of the shard: its layers, then its MTP depths.
    const size_t blocks = shard.layers.size() + shard.mtp.size();
    global_aux_.resize(blocks);
    assignments_.assign(blocks, std::vector<std::int64_t>(static_cast<size_t>(c.layer.num_experts), 0));
    // MTP's per-token normalisation: the valid tokens each depth predicts over the whole batch, and all of them.
    n_total_ = static_cast<double>(batch.loss_mask.template cast<std::int64_t>().sum());
    for (int k = 1; k <= c.mtp_depth; ++k)
      mtp_totals_.push_back(static_cast<double>(
          batch.loss_mask.rightCols(std::max(batch.seq - k, 0)).template cast<std::int64_t>().sum()));
  }

  int microbatches() const { return m_; }
  // Summed chunk by chunk in a fixed order: each chunk sees its microbatches in order in every schedule, so the
  // sum does not depend on the schedule.
  double objective_share() const {
    double sum = 0;
    for (double s : objective_shares_) sum += s;
    return sum;
  }
  double local_valid() const { return local_valid_; }
  std::vector<std::vector<std::int64_t>>& assignments() { return assignments_; }

  void forward(int chunk, int i) {
    InFlight<T>& f = in_flight_[chunk * m_ + i];
    const int vs = chunk * pp_ + stage_;  // this chunk's virtual stage
    double& objective_share = objective_shares_[static_cast<size_t>(chunk)];
    const TokenBatch tb = microbatch(batch_, groups_.layout(), options_.micro_batch, replica_, i);
    f.batch = local_batch(tb, tb.partition[static_cast<size_t>(source_)]);
    // CE counts the loss mask; the router's terms count what the router sees (every row under
    // router-counts-padding, which hands the router no padding mask).
    const bool router_counts_padding = c_.semantics().has(Deviation::router_counts_padding);
    const auto count = [&](double local) {
      TokenCounts n;
      n.local = local;
      n.microbatch = all_sum(*comms_.tp_cp, local);
      n.cp_rank = all_sum(*comms_.tp, local);
      n.step = all_sum(*comms_.tp_dp_cp, local);
      return n;
    };
    const TokenCounts loss_counts = count(static_cast<double>(f.batch.valid));
    const TokenCounts router_counts =
        router_counts_padding ? count(static_cast<double>(f.batch.ids.size())) : loss_counts;
    f.weights = loss_weights(c_, options_.mode, sizes_, m_, loss_counts, router_counts);
    const std::vector<bool> router_padding = router_counts_padding ? std::vector<bool>() : f.batch.padded;
    if (vs == 0) local_valid_ += static_cast<double>(f.batch.valid);

    const Eigen::Index n = f.batch.ids.size();
    Matrix<T> hidden(n, c_.layer.hidden);
    if (vs == 0) {
      for (Eigen::Index k = 0; k < n; ++k) hidden.row(k) = shard_.embedding.row(f.batch.ids(k));
    } else {
      comms_.pp->recv<T>(span_of(hidden), (stage_ + pp_ - 1) % pp_, boundary_tag(vs - 1, m_, i, false));
    }
    const size_t begin = shard_.chunk_offset(static_cast<size_t>(chunk));
    const size_t end = begin + static_cast<size_t>(shard_.chunks[static_cast<size_t>(chunk)].count);
    for (size_t li = begin; li < end; ++li) {
      const int global_layer = shard_.layer_id(li);
      if (c_.has_attention()) {
        if constexpr (std::is_same_v<T, double>) {
          f.attention_in.push_back(hidden);
          f.attention.push_back(std::make_unique<AttentionRank>(c_.attention_config(), shard_.attention[li], comms_,
                                                                options_.kv_exchange, tb.batch, tb.seq));
          hidden += f.attention.back()->forward(stored(bf16_, rms_norm_rows(hidden, shard_.attention_norm[li],
                                                                            c_.rms_eps)));
          hidden = stored(bf16_, std::move(hidden));
        }
      }
      f.block_in.push_back(hidden);
      f.layers.push_back(std::make_unique<MoeLayerRank<T>>(c_.layer_config(global_layer), shard_.layers[li], comms_,
                                                            options_.dispatcher, *options_.kernels,
                                                            replication_of(options_, global_layer),
                                                            options_.expert_waves));
      const RouterInputs router{f.batch.ids, router_padding};
      const LocalTokens tokens{router_padding, f.batch.sequence, options_.micro_batch};
      hidden += f.layers.back()->forward(stored(bf16_, rms_norm_rows(hidden, shard_.block_norm[li], c_.rms_eps)),
                                         router, tokens, global_aux_[li]);
      hidden = stored(bf16_, std::move(hidden));
      objective_share += f.weights.aux * static_cast<double>(f.layers.back()->aux_share()) +
                         f.weights.z * static_cast<double>(f.layers.back()->z_share());
      const auto& a = f.layers.back()->assignments();
      for (size_t e = 0; e < a.size(); ++e) assignments_[li][e] += a[e];
    }
    f.out = hidden;
    if (vs != virtual_stages_ - 1) {
      comms_.pp->send<T>(const_span_of(f.out), (stage_ + 1) % pp_, boundary_tag(vs, m_, i, false));
      return;
    }
    const Matrix<T> normed = stored(bf16_, rms_norm_rows<T>(hidden, shard_.final_norm, c_.rms_eps));
    CrossEntropy<T> ce = cross_entropy<T>(stored(bf16_, Matrix<T>(normed * shard_.head.transpose())), f.batch.labels,
                                          f.batch.padded, f.weights.ce);
    objective_share += f.weights.ce * ce.sum;
    f.grad_logits = stored(bf16_, std::move(ce.grad_logits));
    // The MTP depths, each on this rank's rows of the microbatch rolled by k, from f⁰ = the normed output.
    Matrix<T> previous = normed;
    for (size_t k = 0; k < shard_.mtp.size(); ++k) {
      const LocalBatch rolled =
          local_batch(rolled_batch(tb, static_cast<int>(k) + 1), tb.partition[static_cast<size_t>(source_)]);
      const size_t block = shard_.layers.size() + k;
      f.mtp.push_back(std::make_unique<MtpDepthRank<T>>(
          c_, c_.num_layers + static_cast<int>(k), shard_.mtp[k], comms_, options_,
          RolledRows{rolled.ids, rolled.labels, rolled.padded, rolled.sequence, static_cast<double>(rolled.valid)},
          tb.batch, tb.seq));
      previous = f.mtp.back()->forward(previous, shard_.embedding, shard_.head,
                                       mtp_weight(k, rolled.valid, loss_counts),
                                       f.weights.aux, f.weights.z, global_aux_[block], objective_share);
      const auto& a = f.mtp.back()->assignments();
      for (size_t e = 0; e < a.size(); ++e) assignments_[block][e] += a[e];
    }
  }

  // Depth k's CE weight: λ/D times the main CE's rule on the depth's own (rolled) token counts; per-token,
  // λ/D·N/Nᵏ with N and Nᵏ over the whole batch (the step divides every share by N), or under
  // mtp-per-token-local-ratio λ/D·N_c/Nᵏ_c with the CP rank's counts of the microbatch (`main`: its main CE's).
  double mtp_weight(size_t k, std::int64_t local_valid, const TokenCounts& main) {
    const double scale = c_.mtp_loss_scale / c_.mtp_depth;
    TokenCounts n;
    n.local = static_cast<double>(local_valid);
    n.microbatch = all_sum(*comms_.tp_cp, n.local);
    n.cp_rank = all_sum(*comms_.tp, n.local);
    n.step = all_sum(*comms_.tp_dp_cp, n.local);
    if (options_.mode == LossMode::per_token && c_.semantics().has(Deviation::mtp_per_token_local_ratio))
      return n.cp_rank > 0 ? scale * main.cp_rank / n.cp_rank : 0.0;
    if (options_.mode == LossMode::per_token) return mtp_totals_[k] > 0 ? scale * n_total_ / mtp_totals_[k] : 0.0;
    return scale * loss_weights(c_, options_.mode, sizes_, m_, n, n).ce;
  }

  void backward(int chunk, int i) {
    InFlight<T>& f = in_flight_.at(chunk * m_ + i);
    const int vs = chunk * pp_ + stage_;
    ModelShard<T>& g = grads_;
    Matrix<T> d_hidden(f.out.rows(), f.out.cols());
    if (vs == virtual_stages_ - 1) {
      const Matrix<T> normed = stored(bf16_, rms_norm_rows<T>(f.out, shard_.final_norm, c_.rms_eps));
      // The MTP depths last to first; what reaches f⁰ joins the main CE's gradient at the final norm.
      Matrix<T> grad_normed = Matrix<T>::Zero(normed.rows(), normed.cols());
      for (size_t k = f.mtp.size(); k-- > 0;)
        grad_normed = f.mtp[k]->backward(grad_normed, shard_.embedding, shard_.head, g.mtp[k], g.embedding, g.head);
      g.head += f.grad_logits.transpose() * normed;
      d_hidden = stored(bf16_, rms_norm_rows_backward<T>(f.out, shard_.final_norm, c_.rms_eps,
                                                        grad_normed + f.grad_logits * shard_.head, g.final_norm));
    } else {
      comms_.pp->recv<T>(span_of(d_hidden), (stage_ + 1) % pp_, boundary_tag(vs, m_, i, true));
    }
    const size_t begin = shard_.chunk_offset(static_cast<size_t>(chunk));
    for (size_t j = f.layers.size(); j-- > 0;) {  // j: the chunk's layer, li: the shard's
      const size_t li = begin + j;
      const Matrix<T> dx = f.layers[j]->backward(d_hidden, static_cast<T>(f.weights.aux),
                                                 static_cast<T>(f.weights.z), g.layers[li]);
      d_hidden += rms_norm_rows_backward<T>(f.block_in[j], shard_.block_norm[li], c_.rms_eps, dx, g.block_norm[li]);
      d_hidden = stored(bf16_, std::move(d_hidden));
      if (c_.has_attention()) {
        if constexpr (std::is_same_v<T, double>) {
          const Matrix<T> da = f.attention[j]->backward(d_hidden, g.attention[li]);
          d_hidden += rms_norm_rows_backward<T>(f.attention_in[j], shard_.attention_norm[li], c_.rms_eps, da,
                                                g.attention_norm[li]);
          d_hidden = stored(bf16_, std::move(d_hidden));
        }
      }
    }
    if (vs == 0) {
      for (Eigen::Index k = 0; k < f.batch.ids.size(); ++k) g.embedding.row(f.batch.ids(k)) += d_hidden.row(k);
    } else {
      comms_.pp->send<T>(const_span_of(d_hidden), (stage_ + pp_ - 1) % pp_, boundary_tag(vs - 1, m_, i, true));
    }
    in_flight_.erase(chunk * m_ + i);
  }

 private:
  const ModelConfig& c_;
  const ModelShard<T>& shard_;
  const GlobalBatch& batch_;
  const ProcessGroups& groups_;
  const RankGroups& comms_;
  const StepOptions& options_;
  ModelShard<T>& grads_;
  GroupSizes sizes_;
  int m_ = 0, replica_ = 0, source_ = 0, stage_ = 0, pp_ = 1, virtual_stages_ = 1;
  bool bf16_ = false;  // activations and their gradients stored in bf16 (MoeConfig::bf16_storage)
  std::map<int, InFlight<T>> in_flight_;
  std::vector<GlobalAuxCounts> global_aux_;
  std::vector<std::vector<std::int64_t>> assignments_;
  std::vector<double> objective_shares_;  // per chunk
  double local_valid_ = 0;
  double n_total_ = 0;
  std::vector<double> mtp_totals_;  // per MTP depth
};

// What a stage's schedule leaves besides its gradients.
struct StageResult {
  double objective_share = 0, local_valid = 0;
  std::vector<std::vector<std::int64_t>> assignments;
};

// The schedule over this stage's microbatches in precision T, accumulating into `grads`.
template <typename T>
StageResult run_stage(const ModelConfig& c, const ModelShard<T>& shard, const GlobalBatch& batch,
                         const ProcessGroups& groups, const RankGroups& comms, const StepOptions& options,
                         ModelShard<T>& grads) {
  StageRunner<T> stage(c, shard, batch, groups, comms, options, grads);
  const int chunks = static_cast<int>(shard.chunks.size());
  const auto ops = options.schedule == Schedule::one_forward_one_backward
                       ? interleaved_one_forward_one_backward(groups.layout().pp,
                                                              groups.rank_in(GroupKind::pp, comms.rank),
                                                              stage.microbatches(), chunks)
                       : all_forward_all_backward(stage.microbatches(), chunks);
  for (const PipelineOp& op : ops) {
    if (op.forward) stage.forward(op.chunk, op.microbatch);
    else stage.backward(op.chunk, op.microbatch);
  }
  return {stage.objective_share(), stage.local_valid(), stage.assignments()};
}

}  // namespace

const ReplicationPlan* replication_of(const StepOptions& options, int block) {
  if (options.replication.empty()) return nullptr;
  if (block < 0 || block >= static_cast<int>(options.replication.size()))
    throw std::invalid_argument("replicated experts: no plan for block " + std::to_string(block) + " (" +
                                std::to_string(options.replication.size()) + " plans)");
  return &options.replication[static_cast<size_t>(block)];
}

RankStep train_step(const ModelConfig& model, const ModelShard<double>& main_shard, const GlobalBatch& batch,
                    const ProcessGroups& groups, const RankGroups& comms, const StepOptions& options) {
  // Under bf16 storage the step computes with a bf16 copy of the main parameters (model_shard.hpp bf16_weights).
  std::optional<ModelShard<double>> rounded;
  const ModelShard<double>& shard =
      model.layer.bf16_storage ? rounded.emplace(bf16_weights(main_shard)) : main_shard;
  const ModelConfig c = model.in_mode(options.mode);  // the deviations in effect under this loss mode
  const int first_expert = groups.experts_of(comms.rank, c.layer.num_experts).first;
  RankStep out;
  for (size_t li = 0; li < shard.layers.size(); ++li) out.layers.push_back(shard.layer_id(li));
  for (size_t k = 0; k < shard.mtp.size(); ++k) out.layers.push_back(c.num_layers + static_cast<int>(k));
  StageResult stage;
  // Tokens are counted once per step (the first stage sees every token); the pp group spreads the total.
  auto count_tokens = [&](double local_valid) {
    return all_sum(*comms.pp, all_sum(*comms.tp_dp_cp, local_valid));
  };
  auto sync_plan = [&] { return GradSyncPlan(groups, comms, options.mode, c.semantics(), false); };
  if (options.precision == Precision::bfloat16)
    throw std::invalid_argument("the CPU training step runs in float64 or float32, not bfloat16");
  if (options.precision == Precision::float32 && c.has_attention())
    throw std::invalid_argument("the CPU training step runs attention in float64 only");
  if (options.precision == Precision::float32) {
    const ModelShard<float> single = cast_shard<float>(shard);
    ModelShard<float> grads = zeros_like(single);
    stage = run_stage<float>(c, single, batch, groups, comms, options, grads);
    out.global_tokens = count_tokens(stage.local_valid);
    if (options.synchronise) synchronise_gradients(grads, first_expert, sync_plan(), out.global_tokens);
    out.grads = cast_shard<double>(grads);
  } else {
    out.grads = zeros_like(shard);
    stage = run_stage<double>(c, shard, batch, groups, comms, options, out.grads);
    out.global_tokens = count_tokens(stage.local_valid);
    if (options.synchronise) synchronise_gradients(out.grads, first_expert, sync_plan(), out.global_tokens);
  }
  out.objective = objective_from_shares(options.mode, group_sizes(groups),
                                        all_sum(*comms.pp, all_sum(*comms.tp_dp_cp, stage.objective_share)),
                                        out.global_tokens);

  // Expert bias: real assignments over tp×dp×cp and the whole batch, then β + rate·sign(mean − c).
  for (size_t li = 0; li < out.layers.size(); ++li) {
    auto& counts = stage.assignments[li];
    comms.tp_dp_cp->allreduce<std::int64_t>(counts, ReduceOp::sum);
    out.bias_counts.push_back(counts);
    const MoeConfig lc = c.layer_config(out.layers[li]);
    const bool mtp = li >= shard.layers.size();
    Vector<double> bias;
    if (lc.bias_update_rate) {
      bias = mtp ? shard.mtp[li - shard.layers.size()].layer.expert_bias : shard.layers[li].expert_bias;
      const Vector<double> load =
          Eigen::Map<const IndexVector>(counts.data(), static_cast<Eigen::Index>(counts.size())).cast<double>();
      bias.array() += *lc.bias_update_rate * (load.mean() - load.array()).sign();
    }
    out.expert_bias_updated.push_back(bias);
  }
  return out;
}

}  // namespace moe::dist
