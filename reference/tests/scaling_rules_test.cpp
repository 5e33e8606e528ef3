#include "reference/scaling_rules.hpp"
#include "reference/tests/seed_layout.hpp"

#include <gtest/gtest.h>

#include <set>
#include <stdexcept>
#include <string>
#include <utility>

namespace moe {
namespace {

// Seed 000 ("为什么不能直接除 EDP"): |DP×CP| = 64·2 = 128, |EDP| = 2.
class SeedScaling : public ::testing::Test {
 protected:
  GroupSizes sizes = group_sizes(ProcessGroups(test::seed_layout()));
};

TEST_F(SeedScaling, GroupSizesComeFromTheGroups) {
  EXPECT_EQ(sizes.dp_cp, 128);
  EXPECT_EQ(sizes.expt_dp, 2);
  EXPECT_EQ(sizes.cp, 2);
  EXPECT_EQ(sizes.tp_cp, 2);
}

// SUM: dense and expert both pre-scale by 1/128 and SUM, over dp_cp and expt_dp respectively.
TEST_F(SeedScaling, SumPathPrescalesByOneOver128) {
  const auto rows = grad_sync_table(LossMode::sum, sizes, false);
  ASSERT_EQ(rows.size(), 3u);
  const auto& dense = sync_rule(rows, ParamClass::dense);
  const auto& expert = sync_rule(rows, ParamClass::expert);
  EXPECT_DOUBLE_EQ(dense.prescale, 1.0 / 128);
  EXPECT_DOUBLE_EQ(expert.prescale, 1.0 / 128);
  EXPECT_EQ(expert.prescale_values, "1/128 · 1/1");
  EXPECT_EQ(dense.rule.op, SyncOp::sum);
  EXPECT_EQ(dense.rule.group, GroupKind::dp_cp);
  EXPECT_EQ(dense.group_size, 128);
  EXPECT_EQ(expert.rule.group, GroupKind::expt_dp);
  EXPECT_EQ(expert.group_size, 2);
  EXPECT_EQ(expert.collective, "all-reduce");
  EXPECT_FALSE(expert.rule.divide_by_global_tokens);
}

// AVG: experts pre-scale by |EDP|/|DP×CP| = 2/128, then average over the 2 replicas; dense pre-scale 1 then AVG
// over 128. Either way the summed grad is multiplied by 1/128 — not by 1/2 (÷EDP) nor by 64/128 (×EP).
TEST_F(SeedScaling, AvgPathPrescalesExpertsByTwoOver128) {
  const auto rows = grad_sync_table(LossMode::avg, sizes, true);
  const auto& expert = sync_rule(rows, ParamClass::expert);
  EXPECT_DOUBLE_EQ(expert.prescale, 2.0 / 128);
  EXPECT_EQ(expert.prescale_values, "2/128 · 1/1");
  EXPECT_EQ(expert.rule.op, SyncOp::avg);
  EXPECT_EQ(expert.group_size, 2);
  EXPECT_EQ(expert.collective, "reduce-scatter");
  EXPECT_DOUBLE_EQ(expert.net_factor, 1.0 / 128);
  const auto& dense = sync_rule(rows, ParamClass::dense);
  EXPECT_DOUBLE_EQ(dense.prescale, 1.0);
  EXPECT_DOUBLE_EQ(dense.net_factor, 1.0 / 128);
}

// Per-token: factor 1, SUM, then every grad ÷ the global valid-token count.
TEST_F(SeedScaling, PerTokenUsesFactorOneAndTokenDivision) {
  for (const auto& r : grad_sync_table(LossMode::per_token, sizes, false)) {
    EXPECT_DOUBLE_EQ(r.prescale, 1.0) << to_string(r.rule.param_class);
    EXPECT_EQ(r.rule.op, SyncOp::sum);
    EXPECT_TRUE(r.rule.divide_by_global_tokens);
  }
}

// Sequence-parallel-replicated params (router, norms, shared gate) get the dense sync plus a SUM over TP.
TEST_F(SeedScaling, SequenceParallelParamsAlsoSumOverTp) {
  for (LossMode m : {LossMode::sum, LossMode::avg, LossMode::per_token}) {
    const auto rows = grad_sync_table(m, sizes, false);
    EXPECT_TRUE(sync_rule(rows, ParamClass::sequence_parallel).rule.then_sum_over_tp) << to_string(m);
    EXPECT_FALSE(sync_rule(rows, ParamClass::dense).rule.then_sum_over_tp) << to_string(m);
    EXPECT_FALSE(sync_rule(rows, ParamClass::expert).rule.then_sum_over_tp) << to_string(m);
    EXPECT_EQ(sync_rule(rows, ParamClass::sequence_parallel).rule.group, GroupKind::dp_cp);
  }
}

// Loss weights at the seed layout (cp 2, tp_cp 2, dp 64 → dp_cp 128), B = 4096, b = 1 (m = 64). Intended: CE
// cp/m·1/N_mb, aux and z cp/m, global_aux dp·cp/m; per-token: CE 1, aux and z N_mb, global_aux N_step.
TEST_F(SeedScaling, LossWeightsIntended) {
  const int m = num_microbatches(test::seed_layout(), 4096, 1);
  const auto rows = loss_scale_table(LossMode::sum, sizes, m);
  ASSERT_EQ(rows.size(), 4u);
  for (const auto& r : rows) EXPECT_TRUE(r.rule.when.empty()) << to_string(r.rule.term);
  EXPECT_EQ(loss_scale(rows, LossTerm::ce).values, "2/64");
  EXPECT_EQ(loss_scale(rows, LossTerm::ce).rule.tokens, TokenFactor::inv_microbatch);
  EXPECT_EQ(loss_scale(rows, LossTerm::aux).values, "2/64");
  EXPECT_DOUBLE_EQ(loss_scale(rows, LossTerm::z).factor, 2.0 / 64);
  EXPECT_EQ(loss_scale(rows, LossTerm::global_aux).values, "64·2/64");
  EXPECT_DOUBLE_EQ(loss_scale(rows, LossTerm::global_aux).factor, 128.0 / 64);
  const TokenCounts n{.microbatch = 100, .cp_rank = 60, .local = 30, .step = 6400};
  EXPECT_DOUBLE_EQ(loss_weight(loss_scale(rows, LossTerm::ce), n), 2.0 / 64 / 100);
  EXPECT_EQ(loss_scale_table(LossMode::avg, sizes, m)[0].values, "2/64");

  const auto pt = loss_scale_table(LossMode::per_token, sizes, m);
  EXPECT_DOUBLE_EQ(loss_weight(loss_scale(pt, LossTerm::ce), n), 1.0);
  EXPECT_DOUBLE_EQ(loss_weight(loss_scale(pt, LossTerm::aux), n), 100.0);
  EXPECT_DOUBLE_EQ(loss_weight(loss_scale(pt, LossTerm::z), n), 100.0);
  EXPECT_DOUBLE_EQ(loss_weight(loss_scale(pt, LossTerm::global_aux), n), 6400.0);
  EXPECT_THROW(loss_scale_table(LossMode::sum, sizes, 0), std::invalid_argument);
}

// Under megatron-core-0.19 the rows of its deviations are chosen: CE 1/m·1/N_c, global_aux cp/m; per-token aux
// num_local_tokens·|tp_cp|, global_aux as aux. Turning one deviation off brings its intended row back.
TEST_F(SeedScaling, LossWeightsMegatronProfile) {
  const int m = num_microbatches(test::seed_layout(), 4096, 1);
  const Semantics megatron = Semantics::profile("megatron-core-0.19");
  const TokenCounts n{.microbatch = 100, .cp_rank = 60, .local = 30, .step = 6400};
  const auto rows = loss_scale_table(LossMode::sum, sizes, m, megatron);
  EXPECT_DOUBLE_EQ(loss_weight(loss_scale(rows, LossTerm::ce), n), 1.0 / 64 / 60);
  EXPECT_DOUBLE_EQ(loss_weight(loss_scale(rows, LossTerm::global_aux), n), 2.0 / 64);
  EXPECT_DOUBLE_EQ(loss_weight(loss_scale(rows, LossTerm::aux), n), 2.0 / 64);
  const auto pt = loss_scale_table(LossMode::per_token, sizes, m, megatron);
  EXPECT_DOUBLE_EQ(loss_weight(loss_scale(pt, LossTerm::ce), n), 1.0);
  EXPECT_DOUBLE_EQ(loss_weight(loss_scale(pt, LossTerm::aux), n), 30.0 * 2);
  EXPECT_DOUBLE_EQ(loss_weight(loss_scale(pt, LossTerm::global_aux), n), 30.0 * 2);
  EXPECT_EQ(loss_scale(pt, LossTerm::aux).values, "num_local_tokens · 2");
  const auto dev_like = loss_scale_table(LossMode::per_token, sizes, m,
                                         megatron.with(Deviation::per_token_aux_local_tokens, false));
  EXPECT_DOUBLE_EQ(loss_weight(loss_scale(dev_like, LossTerm::global_aux), n), 100.0);
  const auto no_ce = loss_scale_table(LossMode::sum, sizes, m, megatron.with(Deviation::ce_per_cp_rank, false));
  EXPECT_DOUBLE_EQ(loss_weight(loss_scale(no_ce, LossTerm::ce), n), 2.0 / 64 / 100);
}

// A masked router (a loop that passes padding_mask): Megatron reads the count after its in-place all-reduce, so the
// per-token aux weight is the group's count × |tp_cp| — N_mb for aux, N_step for global_aux (tp_cp = 2 here). Without
// per-token-aux-group-tokens the local row comes back; without the mask the deviation is not in effect.
TEST_F(SeedScaling, LossWeightsMaskedRouterGroupCount) {
  const int m = num_microbatches(test::seed_layout(), 4096, 1);
  const Semantics masked = Semantics::profile("megatron-core-0.19").with(Deviation::router_counts_padding, false);
  const TokenCounts n{.microbatch = 100, .cp_rank = 60, .local = 30, .step = 6400};
  const auto pt = loss_scale_table(LossMode::per_token, sizes, m, masked);
  EXPECT_DOUBLE_EQ(loss_weight(loss_scale(pt, LossTerm::aux), n), 100.0 * 2);
  EXPECT_DOUBLE_EQ(loss_weight(loss_scale(pt, LossTerm::global_aux), n), 6400.0 * 2);
  EXPECT_EQ(loss_scale(pt, LossTerm::aux).values, "N_mb · 2");
  EXPECT_EQ(loss_scale(pt, LossTerm::global_aux).values, "N_step · 2");
  const auto local = loss_scale_table(LossMode::per_token, sizes, m,
                                      masked.with(Deviation::per_token_aux_group_tokens, false));
  EXPECT_DOUBLE_EQ(loss_weight(loss_scale(local, LossTerm::aux), n), 30.0 * 2);
  EXPECT_FALSE(Semantics::profile("megatron-core-0.19").in_mode(LossMode::per_token).has(
      Deviation::per_token_aux_group_tokens));
  EXPECT_TRUE(masked.in_mode(LossMode::per_token).has(Deviation::per_token_aux_group_tokens));
  EXPECT_FALSE(masked.in_mode(LossMode::sum).has(Deviation::per_token_aux_group_tokens));
}

// The invariant behind the SUM/AVG choice: for any layout the net factor on the summed dense and expert grads is
// 1/|dp_cp| in both modes (the historical bugs were ×EP, ÷EDP, or a missing CP).
TEST(ScalingRules, SumAndAvgAgreeOnEveryLayout) {
  for (const auto& l :
       {ParallelLayout{.world = 16, .tp = 2, .pp = 2, .ep = 4},
        ParallelLayout{.world = 48, .tp = 2, .cp = 3, .pp = 2, .ep = 4, .etp = 2},
        ParallelLayout{.world = 32, .cp = 2, .pp = 2, .ep = 8, .etp = 2},
        test::seed_layout(), ParallelLayout{.world = 8, .ep = 8}}) {
    const auto sizes = group_sizes(ProcessGroups(l));
    for (LossMode m : {LossMode::sum, LossMode::avg})
      for (const auto& r : grad_sync_table(m, sizes, false))
        EXPECT_DOUBLE_EQ(r.net_factor, 1.0 / (l.dp() * l.cp)) << to_string(m) << " " << to_string(r.rule.param_class);
  }
}

// The table is complete: one row per parameter class and loss mode, each citing its source; one intended
// loss-scale row per term and family.
TEST(ScalingRules, OneRowPerClassAndMode) {
  std::set<std::pair<ParamClass, LossMode>> seen;
  for (const auto& r : grad_sync_rules()) {
    EXPECT_TRUE(seen.insert({r.param_class, r.loss_mode}).second);
    EXPECT_NE(r.source.find(".py"), std::string_view::npos);
  }
  EXPECT_EQ(seen.size(), 9u);
  // Every (term, family) has exactly one intended row; every deviation row cites the Megatron code it encodes.
  std::set<std::pair<LossTerm, bool>> intended;
  for (const auto& r : loss_scale_rules()) {
    if (r.when.empty()) EXPECT_TRUE(intended.insert({r.term, r.per_token}).second) << to_string(r.term);
    else EXPECT_NE(r.source.find(".py"), std::string_view::npos) << r.formula;
  }
  EXPECT_EQ(intended.size(), 8u);
}

// GTP/EGTP: expert prescale × egtp/gtp (PR #7165); average_in_collective is refused with GTP active.
TEST(ScalingRules, GtpCorrectionAndAvgRefusal) {
  GroupSizes s;
  s.dp_cp = 8;
  s.expt_dp = 2;
  s.gtp = 4;
  s.egtp = 2;
  const auto rows = grad_sync_table(LossMode::sum, s, false);
  EXPECT_DOUBLE_EQ(sync_rule(rows, ParamClass::expert).prescale, 1.0 / 8 * 2 / 4);
  EXPECT_EQ(sync_rule(rows, ParamClass::expert).prescale_values, "1/8 · 2/4");
  EXPECT_DOUBLE_EQ(sync_rule(rows, ParamClass::dense).prescale, 1.0 / 8);
  // Every class ends at 1/(|dp_cp|·gtp): the mean over all 32 data ranks (dp_cp × gtp). Dense weights reduce-scatter
  // a mean over gtp, replicated ones average over gtp, and an expert's mean over egtp meets the egtp/gtp correction.
  for (const auto& r : rows) {
    EXPECT_DOUBLE_EQ(r.net_factor, 1.0 / (8 * 4)) << to_string(r.rule.param_class);
    EXPECT_EQ(r.gtp_size, r.rule.param_class == ParamClass::expert ? 2 : 4);
  }
  EXPECT_EQ(sync_rule(rows, ParamClass::dense).rule.gtp_step, GtpStep::reduce_scatter_mean);
  EXPECT_EQ(sync_rule(rows, ParamClass::sequence_parallel).rule.gtp_step, GtpStep::all_reduce_avg);
  // gtp-factor-missing (the Megatron profiles): no correction, so experts end at 1/(|dp_cp|·egtp), gtp/egtp too big.
  const auto megatron = grad_sync_table(LossMode::sum, s, false, Semantics::profile("megatron-main"));
  EXPECT_DOUBLE_EQ(sync_rule(megatron, ParamClass::expert).prescale, 1.0 / 8);
  EXPECT_DOUBLE_EQ(sync_rule(megatron, ParamClass::expert).net_factor, 1.0 / (8 * 2));
  // Per-token: the GTP axis is SUMmed like the DP axis; the global token count divides.
  for (const auto& r : grad_sync_table(LossMode::per_token, s, false)) {
    EXPECT_DOUBLE_EQ(r.net_factor, 1.0) << to_string(r.rule.param_class);
    EXPECT_TRUE(r.rule.gtp_step == GtpStep::reduce_scatter_sum || r.rule.gtp_step == GtpStep::all_reduce_sum);
  }
  try {
    grad_sync_table(LossMode::avg, s, false);
    FAIL() << "accepted average_in_collective with GTP";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("average_in_collective cannot be combined with GTP"), std::string::npos);
  }
}

TEST(ScalingRules, ParsesLossModes) {
  EXPECT_EQ(parse_loss_mode("per-token"), LossMode::per_token);
  EXPECT_EQ(parse_loss_mode("avg"), LossMode::avg);
  EXPECT_THROW(parse_loss_mode("mean"), std::invalid_argument);
}

}  // namespace
}  // namespace moe
