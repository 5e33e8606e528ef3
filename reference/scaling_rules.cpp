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

// clang-format off
const std::vector<GradSyncRule> kGradSyncRules = {
  // class            mode       prescale                      gtp    op             group               tp sum ÷tokens
  // DDP SUM path: gradient_scaling_factor = expert_gradient_scaling_factor = 1/dp_cp_size; dense buffers
  // reduce over intra_dp_cp_group, expert buffers (BufferKey.is_expert_parallel = not param.allreduce) over
  // intra_expt_dp_group. No EP factor: an expert grad already sums its EP peers' tokens (PR #5956). The expert
  // prescale carries the egtp/gtp correction of PR #7165 (dp_cp excludes the GTP axis).
  {dense,             sum,       Prescale::inv_dp_cp,          false, SyncOp::sum, GroupKind::dp_cp,   false, false, kDdpFactors},
  {expert,            sum,       Prescale::inv_dp_cp,          true,  SyncOp::sum, GroupKind::expt_dp, false, false, kDdpFactors},
  // Router weight, norms, shared gate: dense buffer, then SUM over TP in finalize_model_grads
  // (_allreduce_non_tensor_model_parallel_grads), for every loss mode.
  {sequence_parallel, sum,       Prescale::inv_dp_cp,          false, SyncOp::sum, GroupKind::dp_cp,   true,  false, kTpSum},
  // DDP average_in_collective: gradient_scaling_factor = 1; expert_gradient_scaling_factor =
  // expt_dp_group.size() / dp_cp_group.size(), then reduce_op = AVG over expt_dp, which lands on 1/dp_cp too.
  {dense,             avg,       Prescale::one,                false, SyncOp::avg, GroupKind::dp_cp,   false, false, kDdpFactors},
  {expert,            avg,       Prescale::expt_dp_over_dp_cp, true,  SyncOp::avg, GroupKind::expt_dp, false, false, kDdpFactors},
  {sequence_parallel, avg,       Prescale::one,                false, SyncOp::avg, GroupKind::dp_cp,   true,  false, kTpSum},
  // DDP calculate_per_token_loss: both factors 1.0, SUM; then finalize_model_grads broadcasts num_tokens from
  // the last PP stage, all-reduces it over dp_cp and scales every grad by 1/clamp(num_tokens, min=1). GTP-sharded
  // weights skip their mean pre-scale here (_prescale_wgrads_for_mean_rs), so no egtp/gtp correction.
  {dense,             per_token, Prescale::one,                false, SyncOp::sum, GroupKind::dp_cp,   false, true,  kTokenDivision},
  {expert,            per_token, Prescale::one,                false, SyncOp::sum, GroupKind::expt_dp, false, true,  kTokenDivision},
  {sequence_parallel, per_token, Prescale::one,                false, SyncOp::sum, GroupKind::dp_cp,   true,  true,  kTokenDivision},
};

// Aux and z losses reach the graph through MoEAuxLossAutoScaler (transformer/moe/moe_utils.py), whose backward
// multiplies the loss's gradient by main_loss_backward_scale. Outside per-token mode schedules.py sets it to
// loss_scale·cp_size_for_scaling/num_microbatches (loss_scale = 1 in bf16): the main loss is a per-microbatch
// mean ÷ m, and the dp_cp reduction's 1/|dp_cp| must only divide the aux term by dp (its CP shards are parts of
// one sum), hence ×cp (PR #2217/#2237). In per-token mode the scale is loss_scale and the attached value is
// multiplied by this rank's valid-token count × |tp_cp| (PR #5047: without |tp_cp| the gradient depended on TP
// and CP; PR #5798: for seq_aux that count is seq_local × micro-batch), and the global token division follows.
const std::vector<LossScaleRule> kLossScaleRules = {
  // term          per-token formula                          ×n_local ÷tokens
  {LossTerm::aux, false,    "cp/m",                           false,   false,
   "transformer/moe/router.py: attach_and_log_load_balancing_loss; pipeline_parallel/schedules.py: "
   "set_loss_scale(loss_scale·cp_size_for_scaling/num_microbatches)"},
  {LossTerm::aux, true,     "num_local_tokens · |tp_cp|",     true,    true,
   "transformer/moe/router.py: attach_and_log_load_balancing_loss (aux_loss · num_local_tokens · "
   "tp_cp_group.size()); schedules.py: set_loss_scale(loss_scale)"},
  // z = mean_t(logsumexp(logits_t)²) · coeff/|tp_cp|, attached to the logits through the same autoscaler.
  {LossTerm::z,   false,    "cp/m",                           false,   false,
   "transformer/moe/router.py: apply_z_loss; pipeline_parallel/schedules.py: "
   "set_loss_scale(loss_scale·cp_size_for_scaling/num_microbatches)"},
  {LossTerm::z,   true,     "num_local_tokens · |tp_cp|",     true,    true,
   "transformer/moe/router.py: apply_z_loss (z_loss · num_local_tokens · tp_cp_group.size())"},
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

std::string_view to_string(LossMode mode) {
  switch (mode) {
    case sum: return "sum";
    case avg: return "avg";
    case per_token: return "per-token";
  }
  throw std::logic_error("unknown LossMode");
}

std::string_view to_string(ParamClass param_class) {
  switch (param_class) {
    case dense: return "dense";
    case expert: return "expert";
    case sequence_parallel: return "sequence_parallel";
  }
  throw std::logic_error("unknown ParamClass");
}

std::string_view to_string(SyncOp op) { return op == SyncOp::sum ? "SUM" : "AVG"; }

std::string_view to_string(LossTerm term) { return term == LossTerm::aux ? "aux_loss" : "z_loss"; }

LossMode parse_loss_mode(std::string_view text) {
  for (LossMode m : {sum, avg, per_token})
    if (text == to_string(m)) return m;
  throw std::invalid_argument("unknown loss mode '" + std::string(text) + "' (known: sum, avg, per-token)");
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

std::vector<GradSync> grad_sync_table(LossMode mode, const GroupSizes& sizes, bool distributed_optimizer) {
  if (mode == avg && (sizes.gtp > 1 || sizes.egtp > 1))
    throw std::invalid_argument("scaling rule: average_in_collective cannot be combined with GTP/EGTP > 1 "
                                "(Megatron's DDP asserts not (gtp_active and average_in_collective))");
  std::vector<GradSync> rows;
  for (const auto& rule : kGradSyncRules) {
    if (rule.loss_mode != mode) continue;
    GradSync row{};
    row.rule = rule;
    auto term = prescale_term(rule.prescale, sizes);
    if (rule.gtp_correction) term = term * Term{"egtp/gtp", ratio(sizes.egtp, sizes.gtp), double(sizes.egtp) / sizes.gtp};
    row.prescale_formula = term.formula;
    row.prescale_values = term.values;
    row.prescale = term.value;
    row.collective = distributed_optimizer ? "reduce-scatter" : "all-reduce";
    row.group_size = rule.group == GroupKind::expt_dp ? sizes.expt_dp : sizes.dp_cp;
    row.tp_size = sizes.tp;
    row.net_factor = rule.op == SyncOp::avg ? row.prescale / row.group_size : row.prescale;
    rows.push_back(row);
  }
  return rows;
}

std::vector<LossScale> loss_scale_table(LossMode mode, const GroupSizes& sizes, int num_microbatches) {
  if (num_microbatches < 1) throw std::invalid_argument("scaling rule: num_microbatches must be >= 1");
  std::vector<LossScale> rows;
  for (const auto& rule : kLossScaleRules) {
    if (rule.per_token != (mode == per_token)) continue;
    LossScale row{};
    row.rule = rule;
    if (rule.per_token) {
      row.values = "num_local_tokens · " + std::to_string(sizes.tp_cp);
      row.factor = sizes.tp_cp;
    } else {
      row.values = ratio(sizes.cp, num_microbatches);
      row.factor = static_cast<double>(sizes.cp) / num_microbatches;
    }
    rows.push_back(row);
  }
  return rows;
}

const GradSync& sync_rule(const std::vector<GradSync>& table, ParamClass param_class) {
  for (const auto& row : table)
    if (row.rule.param_class == param_class) return row;
  throw std::logic_error("scaling table: no row for parameter class " + std::string(to_string(param_class)));
}

}  // namespace moe
