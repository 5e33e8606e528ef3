// Small routing cases worked out by hand. Each test builds logits directly: with x_t = e_t (one-hot rows, h = T)
// the logits are l[t, e] = W_g[e, t], so the router weight is the transposed logit table.
#include "reference/capacity.hpp"
#include "reference/moe_layer.hpp"
#include "reference/random_init.hpp"
#include "reference/router.hpp"
#include "reference/tid2eid.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <vector>

namespace moe {
namespace {

// A layer whose logits are exactly `logits` [T, E]; experts are random (routing tests don't look at y).
struct RoutingProbe {
  MoeConfig config;
  MoeParams<double> params;
  MoeInputs<double> inputs;
};

RoutingProbe probe(MoeConfig config, const Matrix<double>& logits, int seq, int batch) {
  config.hidden = static_cast<int>(logits.rows());
  config.num_experts = static_cast<int>(logits.cols());
  config.ffn_hidden = 2;
  RoutingProbe p{config, random_params<double>(config, 8, 5), {}};
  p.params.router_weight = logits.transpose();
  p.inputs.seq = seq;
  p.inputs.batch = batch;
  p.inputs.x = Matrix<double>::Identity(logits.rows(), logits.rows());
  return p;
}

Routing<double> route_probe(const RoutingProbe& p) { return moe_forward(p.config, p.params, p.inputs).routing; }

std::vector<int> selected_row(const Routing<double>& r, int t) {
  std::vector<int> s;
  for (Eigen::Index j = 0; j < r.selected.cols(); ++j) s.push_back(static_cast<int>(r.selected(t, j)));
  return s;
}

MoeConfig sigmoid_k2() {
  MoeConfig c;
  c.topk = 2;
  c.score_function = ScoreFunction::sigmoid;
  return c;
}

// σ(ln 3) = 3/4, σ(0) = 1/2, σ(−ln 3) = 1/4.
Matrix<double> quarter_logits() {
  Matrix<double> l(1, 4);
  l << std::log(3.0), 0.0, -std::log(3.0), 0.0;
  return l;
}

TEST(RouterExact, TieBreakLowerIndexWins) {
  // Scores [3/4, 1/2, 1/4, 1/2]: expert 0, then a tie between 1 and 3 that the lower index wins.
  // Weights (megatron, k = 2): 3/4 / (3/4 + 1/2) = 0.6 and 1/2 / (5/4) = 0.4.
  const auto r = route_probe(probe(sigmoid_k2(), quarter_logits(), 1, 1));
  EXPECT_EQ(selected_row(r, 0), (std::vector<int>{0, 1}));
  EXPECT_NEAR(r.probs(0, 0), 0.6, 1e-15);
  EXPECT_NEAR(r.probs(0, 1), 0.4, 1e-15);
  EXPECT_EQ(r.probs(0, 3), 0.0);
}

// Routing replay: the selection given, the weights still from this call's scores. On scores [3/4, 1/2, 1/4, 1/2]
// the replayed {0, 3} (the other side of the tie at 1/2) weighs 3/4 / (5/4) = 0.6 and 0.4; {2, 0} weighs 1/4 and 3/4.
TEST(RouterExact, AReplayedSelectionTakesItsExpertsWeighedByThisCallsScores) {
  auto p = probe(sigmoid_k2(), quarter_logits(), 1, 1);
  p.inputs.selection = IndexMatrix(1, 2);
  *p.inputs.selection << 0, 3;
  auto r = route_probe(p);
  EXPECT_EQ(selected_row(r, 0), (std::vector<int>{0, 3}));
  EXPECT_NEAR(r.probs(0, 0), 0.6, 1e-15);
  EXPECT_NEAR(r.probs(0, 3), 0.4, 1e-15);
  EXPECT_EQ(r.probs(0, 1), 0.0);
  *p.inputs.selection << 2, 0;
  r = route_probe(p);
  EXPECT_NEAR(r.probs(0, 2), 0.25, 1e-15);
  EXPECT_NEAR(r.probs(0, 0), 0.75, 1e-15);
}

TEST(RouterExact, AReplayedSelectionIsValidated) {
  auto p = probe(sigmoid_k2(), quarter_logits(), 1, 1);
  p.inputs.selection = IndexMatrix(1, 2);
  *p.inputs.selection << 1, 1;
  EXPECT_THROW(route_probe(p), std::invalid_argument);  // one expert twice
  *p.inputs.selection << 0, 4;
  EXPECT_THROW(route_probe(p), std::invalid_argument);  // outside the experts
  p.inputs.selection = IndexMatrix(1, 1);
  EXPECT_THROW(route_probe(p), std::invalid_argument);  // not [tokens, topk]
}

// A bf16 router stores its logits in bf16: 0.1 becomes the nearest bf16, 0.10009765625.
TEST(RouterExact, ABf16RouterRoundsItsLogits) {
  Matrix<double> l(1, 4);
  l << 0.1, 0.0, -1.0, 0.5;
  auto p = probe(sigmoid_k2(), l, 1, 1);
  EXPECT_EQ(route_probe(p).logits(0, 0), 0.1);
  p.config.bf16_router = true;
  EXPECT_EQ(route_probe(p).logits(0, 0), 0.10009765625);
}

TEST(RouterExact, ExpertBiasSelectsButDoesNotWeigh) {
  // β = [0, 0, 0.3, 0]: biased scores [0.75, 0.5, 0.55, 0.5] select {0, 2};
  // weights come from the unbiased scores: 0.75/(0.75+0.25) = 0.75, 0.25; × α = 2 → 1.5, 0.5.
  MoeConfig c = sigmoid_k2();
  c.expert_bias = true;
  c.topk_scaling_factor = 2.0;
  auto p = probe(c, quarter_logits(), 1, 1);
  p.params.expert_bias = Vector<double>::Zero(4);
  p.params.expert_bias(2) = 0.3;
  const auto r = route_probe(p);
  EXPECT_EQ(selected_row(r, 0), (std::vector<int>{0, 2}));
  EXPECT_NEAR(r.probs(0, 0), 1.5, 1e-15);
  EXPECT_NEAR(r.probs(0, 2), 0.5, 1e-15);
}

TEST(RouterExact, GroupLimitedMasksLosingGroupToMinusInfinity) {
  // Groups {0,1} and {2,3}, keep 1 group, k = 2 (top 2 per group are summed).
  // Scores [0.9, 0.1, 0.6, 0.6]: group sums 1.0 vs 1.2, so group {2,3} wins although expert 0 is the best;
  // weights 0.6/1.2 = 0.5 each.
  MoeConfig c = sigmoid_k2();
  c.num_groups = 2;
  c.group_topk = 1;
  Matrix<double> l(1, 4);
  l << std::log(9.0), -std::log(9.0), std::log(1.5), std::log(1.5);
  const RoutingProbe p = probe(c, l, 1, 1);
  const auto r = route_probe(p);
  EXPECT_EQ(selected_row(r, 0), (std::vector<int>{2, 3}));
  EXPECT_NEAR(r.probs(0, 2), 0.5, 1e-15);
  EXPECT_NEAR(r.probs(0, 3), 0.5, 1e-15);
  EXPECT_EQ(r.probs(0, 0), 0.0);

  // Without groups the same scores select {0, 2}: the mask, not the scores, made the difference.
  MoeConfig ungrouped = p.config;
  ungrouped.num_groups = ungrouped.group_topk = 0;
  const RowVector<double> scores = router_scores<double>(ungrouped, l.row(0));
  EXPECT_EQ(select_experts<double>(ungrouped, l.row(0), scores, Vector<double>()), (std::vector<int>{0, 2}));
}

TEST(RouterExact, PreVersusPostSoftmax) {
  // Logits [ln 4, ln 2, 0, 0]: full softmax [4, 2, 1, 1]/8 = [0.5, 0.25, 0.125, 0.125].
  // pre:  top-2 of the full softmax, not renormalised → 0.5, 0.25
  // post: softmax over the two selected logits → 4/6, 2/6
  Matrix<double> l(1, 4);
  l << std::log(4.0), std::log(2.0), 0.0, 0.0;
  MoeConfig c;
  c.topk = 2;
  c.score_function = ScoreFunction::softmax;
  c.pre_softmax = true;
  auto pre = route_probe(probe(c, l, 1, 1));
  EXPECT_NEAR(pre.probs(0, 0), 0.5, 1e-15);
  EXPECT_NEAR(pre.probs(0, 1), 0.25, 1e-15);
  c.pre_softmax = false;
  auto post = route_probe(probe(c, l, 1, 1));
  EXPECT_NEAR(post.probs(0, 0), 2.0 / 3.0, 1e-15);
  EXPECT_NEAR(post.probs(0, 1), 1.0 / 3.0, 1e-15);
}

TEST(RouterExact, NormalisationMegatronVersusDeepSeekAtK1) {
  // k = 1, scores 3/4 for expert 0: megatron leaves it unnormalised (0.75), deepseek renormalises to 1.
  MoeConfig c = sigmoid_k2();
  c.topk = 1;
  EXPECT_NEAR(route_probe(probe(c, quarter_logits(), 1, 1)).probs(0, 0), 0.75, 1e-15);
  c.normalization = Normalization::deepseek;
  EXPECT_NEAR(route_probe(probe(c, quarter_logits(), 1, 1)).probs(0, 0), 1.0, 1e-15);
}

TEST(RouterExact, SqrtSoftplusUsesTorchThreshold) {
  // softplus(25) = 25 exactly above the threshold 20; softplus(0) = ln 2.
  MoeConfig c;
  c.score_function = ScoreFunction::sqrtsoftplus;
  RowVector<double> l(2);
  l << 25.0, 0.0;
  const RowVector<double> s = router_scores<double>(c, l);
  EXPECT_EQ(s(0), std::sqrt(25.0));
  EXPECT_NEAR(s(1), std::sqrt(std::log(2.0)), 1e-16);
}

TEST(RouterExact, HashRoutingAlignsBatchMajorIdsWithSequenceMajorRows) {
  // input_ids [batch = 2, seq = 3] = [[0, 1, 2], [3, 4, 5]]; row t = s·2 + b, so rows carry ids
  // t: 0→0, 1→3, 2→1, 3→4, 4→2, 5→5. tid2eid[id] = {id mod 4, (id + 1) mod 4}.
  MoeConfig c = sigmoid_k2();
  c.hash_routing = true;
  auto p = probe(c, Matrix<double>::Zero(6, 4), 3, 2);
  p.params.tid2eid.resize(6, 2);
  for (int id = 0; id < 6; ++id) {
    p.params.tid2eid(id, 0) = id % 4;
    p.params.tid2eid(id, 1) = (id + 1) % 4;
  }
  p.inputs.input_ids.resize(2, 3);
  p.inputs.input_ids << 0, 1, 2, 3, 4, 5;
  const auto r = route_probe(p);
  const int expected_id[6] = {0, 3, 1, 4, 2, 5};
  for (int t = 0; t < 6; ++t) {
    EXPECT_EQ(selected_row(r, t), (std::vector<int>{expected_id[t] % 4, (expected_id[t] + 1) % 4})) << "row " << t;
    // All logits 0 → equal sigmoid scores → renormalised weights 1/2 each.
    EXPECT_NEAR(r.probs(t, expected_id[t] % 4), 0.5, 1e-15);
  }
}

// Capacity: T = 4 tokens, E = 2, k = 1 (sigmoid, megatron: weight = score), cf = 1 → cap = ceil(4·1/2·1) = 2.
// Every token picks expert 0, with scores σ(l) = [0.6, 0.9, 0.7, 0.8]; expert 1 gets nothing.
RoutingProbe capacity_probe(DropPolicy policy, bool pad) {
  Matrix<double> l(4, 2);
  for (int t = 0; t < 4; ++t) {
    const double s = std::vector<double>{0.6, 0.9, 0.7, 0.8}[static_cast<size_t>(t)];
    l(t, 0) = std::log(s / (1 - s));
    l(t, 1) = -5.0;
  }
  MoeConfig c;
  c.topk = 1;
  c.score_function = ScoreFunction::sigmoid;
  c.capacity_factor = 1.0;
  c.drop_policy = policy;
  c.pad_to_capacity = pad;
  return probe(c, l, 4, 1);
}

TEST(RouterExact, CapacityProbsPolicyKeepsHighestProbabilities) {
  EXPECT_EQ(expert_capacity(4, 1, 2, 1.0), 2);
  const auto r = route_probe(capacity_probe(DropPolicy::probs, false));
  // Keeps tokens 1 (0.9) and 3 (0.8); drops 0 and 2 with probability 0, no renormalisation.
  EXPECT_EQ(r.routing_map.col(0).cast<int>().transpose(), (Eigen::RowVector4i() << 0, 1, 0, 1).finished());
  EXPECT_EQ(r.probs(0, 0), 0.0);
  EXPECT_NEAR(r.probs(1, 0), 0.9, 1e-15);
  EXPECT_EQ(r.tokens_per_expert, (std::vector<std::int64_t>{2, 0}));
}

TEST(RouterExact, CapacityPositionPolicyKeepsEarliestTokens) {
  const auto r = route_probe(capacity_probe(DropPolicy::position, false));
  EXPECT_EQ(r.routing_map.col(0).cast<int>().transpose(), (Eigen::RowVector4i() << 1, 1, 0, 0).finished());
  EXPECT_NEAR(r.probs(0, 0), 0.6, 1e-15);
}

TEST(RouterExact, PadToCapacityFillsWithEarliestUnroutedTokens) {
  // Expert 1 has 0 < min(cap, T) = 2 rows: tokens 0 and 1 are padded in with probability 0. They are GEMM rows
  // (routing map, tokens_per_expert) but not assignments (bias counts).
  const auto r = route_probe(capacity_probe(DropPolicy::probs, true));
  EXPECT_EQ(r.routing_map.col(1).cast<int>().transpose(), (Eigen::RowVector4i() << 1, 1, 0, 0).finished());
  EXPECT_TRUE(r.padded_slot(0, 1) && r.padded_slot(1, 1) && !r.padded_slot(1, 0));
  EXPECT_EQ(r.probs(0, 1), 0.0);
  EXPECT_EQ(r.tokens_per_expert, (std::vector<std::int64_t>{2, 2}));
  EXPECT_EQ(r.bias_counts, (std::vector<std::int64_t>{2, 0}));
}

TEST(RouterExact, CapacityIsPerPartition) {
  // Two parts {0, 1} and {2, 3} (two source ranks): cap = ceil(2·1/2·1) = 1 each. Probs policy keeps the best of
  // each part: token 1 (0.9) and token 3 (0.8) — the same as one part here — while position keeps 0 and 2.
  auto p = capacity_probe(DropPolicy::position, false);
  p.inputs.partition = {{0, 1}, {2, 3}};
  const auto r = route_probe(p);
  EXPECT_EQ(r.routing_map.col(0).cast<int>().transpose(), (Eigen::RowVector4i() << 1, 0, 1, 0).finished());
}

}  // namespace
}  // namespace moe

namespace moe {
namespace {

TEST(RouterExact, PlaceholderHashTableWarns) {
  std::ostringstream warnings;
  const IndexMatrix table = placeholder_tid2eid(5, 2, 4, warnings);
  EXPECT_NE(warnings.str().find("placeholder tid2eid"), std::string::npos);
  // id 3: (3 + 0) mod 4 = 3, (3 + 1) mod 4 = 0.
  EXPECT_EQ(table(3, 0), 3);
  EXPECT_EQ(table(3, 1), 0);
}

}  // namespace
}  // namespace moe
