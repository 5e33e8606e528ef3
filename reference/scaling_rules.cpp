#include "reference/scaling_rules.hpp"

#include <stdexcept>
#include <string>

namespace moe {
namespace {

using enum ParamClass;
using enum LossMode;

constexpr std::string_view kDdpFactors =
    "distributed/distributed_data_parallel.py: DistributedDataParallel.__init__ (gradient_scaling_factor, "
    "expert_gradient_scaling_factor); param_and_grad_buffer.py: start_grad_sync";
constexpr std::string_view kTokenDivision = "distributed/finalize_model_grads.py: finalize_model_grads (num_tokens "
                                            "all-reduced over dp_cp, scale_gradients(1/num_tokens))";
constexpr std::string_view kTpSum = "distributed/finalize_model_grads.py: _allreduce_non_tensor_model_parallel_grads";
constexpr std::string_view kGtpSharded = "tensor_parallel/generalized_tensor_parallelism.py: _reduce_scatter "
                                         "(_prescale_wgrads_for_mean_rs: × 1/size unless calculate_per_token_loss)";
constexpr std::string_view kGtpReplicated = "distributed/finalize_model_grads.py: "
                                            "_allreduce_replicated_grads_over_gtp_remat_group (AVG, SUM per-token)";

// clang-format off
const std::vector<GradSyncRule> kGradSyncRules = {
  // class            mode       prescale                      gtp    op             group               tp sum ÷tokens  source  gtp step
  // DDP SUM path: gradient_scaling_factor = expert_gradient_scaling_factor = 1/dp_cp_size; dense buffers
  // reduce over intra_dp_cp_group, expert buffers (BufferKey.is_expert_parallel = not param.allreduce) over
  // intra_expt_dp_group. No EP factor: an expert grad already sums its EP peers' tokens (PR #5956). The expert
  // prescale carries the egtp/gtp correction of PR #7165 (dp_cp excludes the GTP axis).
  {dense,             sum,       Prescale::inv_dp_cp,          false, SyncOp::sum, GroupKind::dp_cp,   false, false, kDdpFactors, GtpStep::reduce_scatter_mean, kGtpSharded},
  {expert,            sum,       Prescale::inv_dp_cp,          true,  SyncOp::sum, GroupKind::expt_dp, false, false, kDdpFactors, GtpStep::reduce_scatter_mean, kGtpSharded},
  // Router weight, norms, shared gate: dense buffer, then SUM over TP in finalize_model_grads
  // (_allreduce_non_tensor_model_parallel_grads), for every loss mode.
  {sequence_parallel, sum,       Prescale::inv_dp_cp,          false, SyncOp::sum, GroupKind::dp_cp,   true,  false, kTpSum, GtpStep::all_reduce_avg, kGtpReplicated},
  // DDP average_in_collective: gradient_scaling_factor = 1; expert_gradient_scaling_factor =
  // expt_dp_group.size() / dp_cp_group.size(), then reduce_op = AVG over expt_dp, which lands on 1/dp_cp too.
  {dense,             avg,       Prescale::one,                false, SyncOp::avg, GroupKind::dp_cp,   false, false, kDdpFactors, GtpStep::none, "average_in_collective is refused with GTP"},
  {expert,            avg,       Prescale::expt_dp_over_dp_cp, true,  SyncOp::avg, GroupKind::expt_dp, false, false, kDdpFactors, GtpStep::none, "average_in_collective is refused with GTP"},
  {sequence_parallel, avg,       Prescale::one,                false, SyncOp::avg, GroupKind::dp_cp,   true,  false, kTpSum, GtpStep::none, "average_in_collective is refused with GTP"},
  // DDP calculate_per_token_loss: both factors 1.0, SUM; then finalize_model_grads broadcasts num_tokens from
  // the last PP stage, all-reduces it over dp_cp and scales every grad by 1/clamp(num_tokens, min=1). GTP-sharded
  // weights skip their mean pre-scale here (_prescale_wgrads_for_mean_rs), so no egtp/gtp correction.
  {dense,             per_token, Prescale::one,                false, SyncOp::sum, GroupKind::dp_cp,   false, true,  kTokenDivision, GtpStep::reduce_scatter_sum, kGtpSharded},
  {expert,            per_token, Prescale::one,                false, SyncOp::sum, GroupKind::expt_dp, false, true,  kTokenDivision, GtpStep::reduce_scatter_sum, kGtpSharded},
  {sequence_parallel, per_token, Prescale::one,                false, SyncOp::sum, GroupKind::dp_cp,   true,  true,  kTokenDivision, GtpStep::all_reduce_sum, kGtpReplicated},
};

// Loss scales. Outside per-token mode every rank's loss is a per-microbatch mean ÷ m, and the dp_cp reduction's
// 1/|dp_cp| must only divide by dp: the CP ranks' shares are parts of one sum, hence ×cp (PR #2217/#2237 for the
// aux losses: MoEAuxLossAutoScaler's scale is loss_scale·cp_size_for_scaling/num_microbatches). In per-token mode
// each rank's value is weighted by a token count and the global token division follows.
constexpr std::string_view kAutoScaler =
    "transformer/moe/moe_utils.py: MoEAuxLossAutoScaler; pipeline_parallel/schedules.py: "
    "set_loss_scale(loss_scale·cp_size_for_scaling/num_microbatches)";
constexpr std::string_view kCeMegatron =
    "pretrain_gpt.py: loss_func (num_tokens = this CP shard's loss_mask.sum()); pipeline_parallel/schedules.py: "
    "forward_step (output_tensor /= clamp(num_tokens, 1); /= num_microbatches)";
constexpr std::string_view kPerTokenAttach = "transformer/moe/router.py: attach_and_log_load_balancing_loss";
constexpr std::string_view kGroupCount =
    "transformer/moe/router.py: attach_and_log_load_balancing_loss with the count of moe_utils.py: "
    "get_tokens_per_expert_and_token_count, all-reduced in place (PR #7481)";

using enum LossTerm;
using enum LayoutFactor;
using enum TokenFactor;
using enum Deviation;
const std::vector<LossScaleRule> kLossScaleRules = {
  // term       per-token when                                                 layout         tokens
  {ce,          false, {},                                                     cp_over_m,     inv_microbatch,
   "cp/m · 1/N_mb", "the microbatch's CE mean, each CP rank dividing by the microbatch's count (issue #7452, "
   "PR #7513)"},
  {ce,          false, {ce_per_cp_rank},                                       inv_m,         inv_cp_rank,
   "1/m · 1/N_c", kCeMegatron},
  {aux,         false, {},                                                     cp_over_m,     none,
   "cp/m", kAutoScaler},
  {global_aux,  false, {},                                                     dp_cp_over_m,  none,
   "dp·cp/m", "the group's loss is the sum of every replica's share: aux's cp/m × dp (issue #3672, PR #5007)"},
  {global_aux,  false, {global_aux_dp_average},                                cp_over_m,     none,
   "cp/m", kAutoScaler},
  {z,           false, {},                                                     cp_over_m,     none,
   "cp/m", "transformer/moe/router.py: apply_z_loss; same autoscaler scale as aux"},
  {ce,          true,  {},                                                     one,           none,
   "1", "pipeline_parallel/schedules.py: forward_step (no division under calculate_per_token_loss)"},
  {aux,         true,  {},                                                     one,           microbatch,
   "N_mb", "Megatron dev: attach_and_log_load_balancing_loss (aux_loss · valid count all-reduced over tp_cp)"},
  {aux,         true,  {per_token_aux_local_tokens},                           one,           local_times_tp_cp,
   "num_local_tokens · |tp_cp|", kPerTokenAttach},
  {global_aux,  true,  {},                                                     one,           step,
   "N_step", "the group's loss weighted by its step's tokens (tp×dp×cp)"},
  {global_aux,  true,  {global_aux_dp_average},                                one,           microbatch,
   "N_mb", kPerTokenAttach},
  {global_aux,  true,  {global_aux_dp_average, per_token_aux_local_tokens},   one,           local_times_tp_cp,
   "num_local_tokens · |tp_cp|", kPerTokenAttach},
  {aux,         true,  {per_token_aux_local_tokens, per_token_aux_group_tokens},              one, group_times_tp_cp,
   "N_mb · |tp_cp|", kGroupCount},
  {global_aux,  true,  {global_aux_dp_average, per_token_aux_local_tokens, per_token_aux_group_tokens}, one,
   group_times_tp_cp, "N_step · |tp_cp|", kGroupCount},
  {z,           true,  {},                                                     one,           microbatch,
   "N_mb", "transformer/moe/router.py: apply_z_loss (z_loss · num_local_tokens · |tp_cp|: with the local mean, "
   "coeff·Σ lse², the same as N_mb × the microbatch mean)"},
};
// clang-format on

std::string ratio(int num, int den) { return std::to_string(num) + "/" + std::to_string(den); }

// A factor of a pre-scale: its formula, the formula with sizes substituted, and its value.
struct Term {
  std::string formula;
  std::string values;
  double value = 1.0;
  Term operator*(const Term& other) const {
    return {formula + " · " + other.formula, values + " · " + other.values, value * other.value};
  }
};

Term prescale_term(Prescale prescale, const GroupSizes& sizes) {
  switch (prescale) {
    case Prescale::one: return {"1", "1", 1.0};
    case Prescale::inv_dp_cp: return {"1/|dp_cp|", ratio(1, sizes.dp_cp), 1.0 / sizes.dp_cp};
    case Prescale::expt_dp_over_dp_cp:
      return {"|expt_dp|/|dp_cp|", ratio(sizes.expt_dp, sizes.dp_cp), double(sizes.expt_dp) / sizes.dp_cp};
  }
  throw std::logic_error("unknown Prescale");
}

}  // namespace

std::string_view to_string(ParamClass param_class) {
  switch (param_class) {
    case dense: return "dense";
    case expert: return "expert";
    case sequence_parallel: return "sequence_parallel";
  }
  throw std::logic_error("unknown ParamClass");
}

std::string_view to_string(TokenFactor factor) {
  switch (factor) {
    case TokenFactor::none: return "none";
    case TokenFactor::inv_microbatch: return "1/N_mb";
    case TokenFactor::inv_cp_rank: return "1/N_c";
    case TokenFactor::microbatch: return "N_mb";
    case TokenFactor::local_times_tp_cp: return "num_local_tokens";
    case TokenFactor::step: return "N_step";
    case TokenFactor::group_times_tp_cp: return "N_group";
  }
  throw std::logic_error("unknown TokenFactor");
}

std::string_view to_string(SyncOp op) { return op == SyncOp::sum ? "SUM" : "AVG"; }

std::string_view to_string(GtpStep step) {
  switch (step) {
    case GtpStep::none: return "none";
    case GtpStep::reduce_scatter_mean: return "reduce-scatter mean";
    case GtpStep::reduce_scatter_sum: return "reduce-scatter SUM";
    case GtpStep::all_reduce_avg: return "all-reduce AVG";
    case GtpStep::all_reduce_sum: return "all-reduce SUM";
  }
  throw std::logic_error("unknown GtpStep");
}

std::string_view to_string(LossTerm term) {
  switch (term) {
    case LossTerm::ce: return "ce";
    case LossTerm::aux: return "aux_loss";
    case LossTerm::global_aux: return "global_aux_loss";
    case LossTerm::z: return "z_loss";
  }
  throw std::logic_error("unknown LossTerm");
}

GroupSizes group_sizes(const ProcessGroups& groups) {
  const auto size = [&](GroupKind kind) { return static_cast<int>(groups.group(kind, 0).size()); };
  GroupSizes s;
  s.tp = size(GroupKind::tp);
  s.cp = size(GroupKind::cp);
  s.tp_cp = size(GroupKind::tp_cp);
  s.dp_cp = size(GroupKind::dp_cp);
  s.expt_dp = size(GroupKind::expt_dp);
  s.gtp = groups.layout().gtp;
  s.egtp = groups.layout().egtp;
  return s;
}

const std::vector<GradSyncRule>& grad_sync_rules() { return kGradSyncRules; }

const std::vector<LossScaleRule>& loss_scale_rules() { return kLossScaleRules; }

std::vector<GradSync> grad_sync_table(LossMode mode, const GroupSizes& sizes, bool distributed_optimizer,
                                      const Semantics& semantics) {
  if (mode == avg && (sizes.gtp > 1 || sizes.egtp > 1))
    throw std::invalid_argument("scaling rule: average_in_collective cannot be combined with GTP/EGTP > 1 "
                                "(Megatron's DDP asserts not (gtp_active and average_in_collective))");
  std::vector<GradSync> rows;
  for (const auto& rule : kGradSyncRules) {
    if (rule.loss_mode != mode) continue;
    GradSync row{};
    row.rule = rule;
    auto term = prescale_term(rule.prescale, sizes);
    if (rule.gtp_correction && !semantics.has(Deviation::gtp_factor_missing)) term = term * Term{"egtp/gtp", ratio(sizes.egtp, sizes.gtp), double(sizes.egtp) / sizes.gtp};
    row.prescale_formula = term.formula;
    row.prescale_values = term.values;
    row.prescale = term.value;
    row.collective = distributed_optimizer ? "reduce-scatter" : "all-reduce";
    row.group_size = rule.group == GroupKind::expt_dp ? sizes.expt_dp : sizes.dp_cp;
    row.tp_size = sizes.tp;
    row.net_factor = rule.op == SyncOp::avg ? row.prescale / row.group_size : row.prescale;
    row.gtp_group = rule.param_class == expert ? GroupKind::expt_gtp : GroupKind::gtp;
    row.gtp_size = rule.param_class == expert ? sizes.egtp : sizes.gtp;
    if (rule.gtp_step == GtpStep::reduce_scatter_mean || rule.gtp_step == GtpStep::all_reduce_avg)
      row.net_factor /= row.gtp_size;
    rows.push_back(row);
  }
  return rows;
}

std::vector<LossScale> loss_scale_table(LossMode mode, const GroupSizes& sizes, int num_microbatches,
                                        const Semantics& semantics) {
  if (num_microbatches < 1) throw std::invalid_argument("scaling rule: num_microbatches must be >= 1");
  const Semantics on = semantics.in_mode(mode);
  const bool per_token = mode == LossMode::per_token;
  const int m = num_microbatches;
  std::vector<LossScale> rows;
  for (LossTerm term : {LossTerm::ce, LossTerm::aux, LossTerm::global_aux, LossTerm::z}) {
    const LossScaleRule* best = nullptr;
    for (const auto& rule : kLossScaleRules) {
      if (rule.term != term || rule.per_token != per_token) continue;
      bool applies = true;
      for (Deviation d : rule.when) applies = applies && on.has(d);
      if (applies && (!best || rule.when.size() > best->when.size())) best = &rule;
    }
    if (!best) throw std::logic_error("scaling table: no loss-scale row for " + std::string(to_string(term)));
    LossScale row{};
    row.rule = *best;
    switch (best->layout) {
      case LayoutFactor::one: row.values = "1"; row.factor = 1.0; break;
      case LayoutFactor::cp_over_m: row.values = ratio(sizes.cp, m); row.factor = double(sizes.cp) / m; break;
      case LayoutFactor::inv_m: row.values = ratio(1, m); row.factor = 1.0 / m; break;
      case LayoutFactor::dp_cp_over_m:  // the group's replicas: dp ranks and their GTP peers
        row.values = std::to_string(sizes.dp_cp / sizes.cp * sizes.gtp) + "·" + ratio(sizes.cp, m);
        row.factor = double(sizes.dp_cp) * sizes.gtp / m;
        break;
    }
    if (best->tokens == TokenFactor::local_times_tp_cp || best->tokens == TokenFactor::group_times_tp_cp) {
      row.values = std::string(best->tokens == TokenFactor::local_times_tp_cp ? "num_local_tokens"
                               : term == LossTerm::global_aux                  ? "N_step"
                                                                               : "N_mb") +
                   " · " + std::to_string(sizes.tp_cp);
      row.factor *= sizes.tp_cp;
    }
    rows.push_back(row);
  }
  return rows;
}

const LossScale& loss_scale(const std::vector<LossScale>& table, LossTerm term) {
  for (const auto& row : table)
    if (row.rule.term == term) return row;
  throw std::logic_error("loss-scale table: no row for " + std::string(to_string(term)));
}

double loss_weight(const LossScale& scale, const TokenCounts& n) {
  const auto inverse = [](double count) { return count > 0 ? 1.0 / count : 0.0; };  // Megatron clamps at 1; CE is 0
  switch (scale.rule.tokens) {
    case TokenFactor::none: return scale.factor;
    case TokenFactor::inv_microbatch: return scale.factor * inverse(n.microbatch);
    case TokenFactor::inv_cp_rank: return scale.factor * inverse(n.cp_rank);
    case TokenFactor::microbatch: return scale.factor * n.microbatch;
    case TokenFactor::local_times_tp_cp: return scale.factor * n.local;
    case TokenFactor::step: return scale.factor * n.step;
    case TokenFactor::group_times_tp_cp:  // the group the loss's counts are reduced over
      return scale.factor * (scale.rule.term == LossTerm::global_aux ? n.step : n.microbatch);
  }
  throw std::logic_error("unknown TokenFactor");
}

double objective_from_shares(LossMode mode, const GroupSizes& sizes, double sum_of_shares, double global_tokens) {
  if (mode == LossMode::per_token) return sum_of_shares / global_tokens;
  return sum_of_shares / (static_cast<double>(sizes.dp_cp) * sizes.gtp);  // the replicas' mean, GTP peers included
}

const GradSync& sync_rule(const std::vector<GradSync>& table, ParamClass param_class) {
  for (const auto& row : table)
    if (row.rule.param_class == param_class) return row;
  throw std::logic_error("scaling table: no row for parameter class " + std::string(to_string(param_class)));
}

}  // namespace moe
