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

// Aux and z backward scale: cp/m = 2/64 with B = 4096, b = 1 (m = 64); per-token: n_local · |tp_cp| = n_local · 2.
TEST_F(SeedScaling, AuxAndZLossBackwardScales) {
  const int m = num_microbatches(test::seed_layout(), 4096, 1);
  const auto rows = loss_scale_table(LossMode::sum, sizes, m);
  ASSERT_EQ(rows.size(), 2u);
  for (const auto& r : rows) {
    EXPECT_EQ(r.values, "2/64");
    EXPECT_DOUBLE_EQ(r.factor, 2.0 / 64);
    EXPECT_FALSE(r.rule.times_local_tokens);
  }
  EXPECT_EQ(loss_scale_table(LossMode::avg, sizes, m)[0].values, "2/64");
  for (const auto& r : loss_scale_table(LossMode::per_token, sizes, m)) {
    EXPECT_DOUBLE_EQ(r.factor, 2.0);
    EXPECT_TRUE(r.rule.times_local_tokens);
    EXPECT_TRUE(r.rule.divide_by_global_tokens);
  }
  EXPECT_THROW(loss_scale_table(LossMode::sum, sizes, 0), std::invalid_argument);
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

// The table is complete: one row per parameter class and loss mode, each citing its source; two loss-scale rows
// (aux, z) per family.
TEST(ScalingRules, OneRowPerClassAndMode) {
  std::set<std::pair<ParamClass, LossMode>> seen;
  for (const auto& r : grad_sync_rules()) {
    EXPECT_TRUE(seen.insert({r.param_class, r.loss_mode}).second);
    EXPECT_NE(r.source.find(".py"), std::string_view::npos);
  }
  EXPECT_EQ(seen.size(), 9u);
  EXPECT_EQ(loss_scale_rules().size(), 4u);
  for (const auto& r : loss_scale_rules()) EXPECT_NE(r.source.find(".py"), std::string_view::npos);
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
