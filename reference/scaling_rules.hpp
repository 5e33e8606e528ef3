// The gradient-scaling rules of data/expert-parallel training, as one table.
//
// After backward, every rank holds the gradient of its own share of the objective. Synchronisation must turn
// those into the gradient of the global objective, for each class of parameter:
//   dense             replicated over dp_cp (attention, shared expert, dense MLP, ...);
//   expert            routed-expert weights, replicated over expt_dp only (different EP ranks hold different
//                     experts; an expert's grad already sums the tokens of all its EP peers);
//   sequence_parallel replicated over TP *and* dp_cp, each TP rank seeing different tokens (router weight,
//                     norms, shared-expert gate): SUMmed over tp after the data-parallel sync.
// Loss modes: sum (Megatron's default DDP: pre-scale then SUM), avg (average_in_collective: the collective
// averages), per_token (calculate_per_token_loss: SUM, then divide by the global valid-token count).
// The table encodes Megatron-Core main (megatron/core/distributed/, each row naming its file; docs/parallelism.md);
// the oracle checks a backend against the gradient of the objective, so a wrong row here still shows up there.
#pragma once

#include "reference/loss_mode.hpp"
#include "reference/process_groups.hpp"
#include "reference/semantics.hpp"

#include <string>
#include <string_view>
#include <vector>

namespace moe {

enum class ParamClass { dense, expert, sequence_parallel };
enum class SyncOp { sum, avg };
// The data-parallel pre-scale, symbolically.
enum class Prescale { one, inv_dp_cp, expt_dp_over_dp_cp };
enum class LossTerm { ce, aux, global_aux, z };
// What completes the GTP rematerialisation axis of a class's gradient (an identity while gtp = egtp = 1):
//   GTP-sharded weights (dense linear layers over gtp, routed experts over expt_gtp) reduce-scatter the temporary
//   full wgrad back to the shard, pre-scaled by 1/size into a mean except under per-token loss;
//   replicated ones (router, norms, shared gate) are all-reduced over gtp after the data-parallel collective:
//   AVG, or SUM under per-token loss.
enum class GtpStep { none, reduce_scatter_mean, reduce_scatter_sum, all_reduce_avg, all_reduce_sum };

std::string_view to_string(ParamClass param_class);
std::string_view to_string(SyncOp op);  // "SUM", "AVG"
std::string_view to_string(LossTerm term);
std::string_view to_string(GtpStep step);  // e.g. "reduce-scatter mean"

// The sizes the rules depend on. gtp/egtp are the GTP rematerialisation axes (1 without GTP).
struct GroupSizes {
  int tp = 1;
  int cp = 1;
  int tp_cp = 1;
  int dp_cp = 1;
  int expt_dp = 1;
  int gtp = 1;
  int egtp = 1;
};
GroupSizes group_sizes(const ProcessGroups& groups);

// One row: how one parameter class is synchronised under one loss mode.
struct GradSyncRule {
  ParamClass param_class;
  LossMode loss_mode;
  Prescale prescale;             // multiplied into the grad buffer before the collective
  bool gtp_correction;           // prescale also × egtp/gtp (expert grads under GTP, PR #7165)
  SyncOp op;                   // of the data-parallel collective
  GroupKind group;               // dp_cp or expt_dp
  bool then_sum_over_tp;         // a second all-reduce, SUM over tp
  bool divide_by_global_tokens;  // finally ÷ the valid-token count all-reduced over dp_cp
  std::string_view source;       // the Megatron code it encodes
  GtpStep gtp_step;              // over gtp (dense mesh) or expt_gtp (expert class)
  std::string_view gtp_source;   // the Megatron code of that step
};
// All rows: 3 parameter classes × 3 loss modes.
const std::vector<GradSyncRule>& grad_sync_rules();

// A row evaluated on a layout's group sizes.
struct GradSync {
  GradSyncRule rule;
  std::string prescale_formula;  // e.g. "|expt_dp|/|dp_cp| · egtp/gtp"
  std::string prescale_values;   // the same with the sizes substituted, e.g. "2/128 · 1/1"
  double prescale = 1.0;
  std::string collective;        // "all-reduce", or "reduce-scatter" with the distributed optimizer
  int group_size = 1;
  int tp_size = 1;
  GroupKind gtp_group = GroupKind::gtp;  // expt_gtp for the expert class
  int gtp_size = 1;                      // |gtp| or |expt_gtp|
  // The factor on the plain sum of the group's gradients (over the GTP axis too): prescale, ÷ group size when the
  // collective averages, ÷ gtp_size when the GTP step is a mean. 1/(|dp_cp|·gtp) for every class in sum and avg
  // (with the egtp/gtp correction), 1 in per_token.
  double net_factor = 1.0;
};
// Throws std::invalid_argument for avg with GTP (Megatron's DDP asserts not (gtp_active and average_in_collective)).
// Under gtp-factor-missing (the Megatron profiles) the expert rows drop the egtp/gtp correction.
std::vector<GradSync> grad_sync_table(LossMode mode, const GroupSizes& sizes, bool distributed_optimizer,
                                      const Semantics& semantics = {});

// The row of an evaluated table for one parameter class (every table has one per class).
const GradSync& sync_rule(const std::vector<GradSync>& table, ParamClass param_class);

// The loss scales: the weight of each loss term in one rank's backward, so that the synchronised gradient is that
// of the objective. CE is this rank's CE sum; aux, global_aux and z are this rank's shares (the shares of a group
// add up to the group's loss). Aux and z reach the graph through MoEAuxLossAutoScaler, whose backward scale
// schedules.py sets; CE is divided in the loss function and schedules.py. A weight is a layout factor times a
// run-time token count. Each term has an intended row and, where a Megatron deviation changes it, rows for that
// deviation (`when`): a table is evaluated under a Semantics value and picks, per term, the row with the most
// deviations that are all on.
enum class LayoutFactor { one, cp_over_m, inv_m, dp_cp_over_m };
enum class TokenFactor {
  none,
  inv_microbatch,     // 1/N_mb: the microbatch's valid tokens over tp×cp (0 when there are none)
  inv_cp_rank,        // 1/N_c: this CP rank's valid tokens, over its tp ranks (0 when there are none)
  microbatch,         // N_mb
  local_times_tp_cp,  // n_local·|tp_cp|: this rank's own valid tokens times the group size
  step,               // N_step: the valid tokens of the step's microbatches over tp×dp×cp
  group_times_tp_cp,  // N_group·|tp_cp|: the loss's reduce group's valid tokens (aux: N_mb, global_aux: N_step)
};
// "none", "1/N_mb", "1/N_c", "N_mb", "num_local_tokens", "N_step", "N_group"
std::string_view to_string(TokenFactor factor);
struct LossScaleRule {
  LossTerm term;
  bool per_token;               // the per-token family, or sum/avg
  std::vector<Deviation> when;  // the deviations this row encodes (empty: the intended row)
  LayoutFactor layout;
  TokenFactor tokens;
  std::string_view formula;     // symbolic
  std::string_view source;
};
const std::vector<LossScaleRule>& loss_scale_rules();

struct LossScale {
  LossScaleRule rule;
  std::string values;   // the formula's layout-dependent part substituted, e.g. "2/64"
  double factor = 1.0;  // that part's value; the weight is factor × the rule's token count
};
// One row per loss term (ce, aux, global_aux, z), for the deviations of `semantics` in effect under `mode`.
std::vector<LossScale> loss_scale_table(LossMode mode, const GroupSizes& sizes, int num_microbatches,
                                        const Semantics& semantics = {});
const LossScale& loss_scale(const std::vector<LossScale>& table, LossTerm term);

// The run-time counts a weight may use, and a row's weight from them.
struct TokenCounts {
  double microbatch = 0;  // N_mb
  double cp_rank = 0;     // N_c
  double local = 0;       // n_local
  double step = 0;        // N_step
};
double loss_weight(const LossScale& scale, const TokenCounts& counts);

// The objective J from the weighted losses of every rank and microbatch of a step (the weights above): their sum
// ÷ dp·cp (each replica's shares add up to one copy of J per data-parallel replica and CP rank), or ÷ N, the
// step's valid tokens, in per_token mode.
double objective_from_shares(LossMode mode, const GroupSizes& sizes, double sum_of_shares, double global_tokens);

}  // namespace moe
