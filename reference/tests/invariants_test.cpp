// Invariants of the layer that hold for any input: combine with identity-like experts, aux losses at uniform
// load, the direction of the bias update, float against double, and the boundary checks.
#include "reference/expert_bias.hpp"
#include "reference/presets.hpp"
#include "reference/router_losses.hpp"
#include "reference/score_functions.hpp"
#include "layer_fixture.hpp"
#include "reference/tests/expect_error.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>

namespace moe::test {
namespace {

// Makes expert e compute F_e(u) = p·u exactly in the clamp's linear regime: the last input column is a
// constant 1, the gate rows read it ×1000 so min(gate, L) = L always (silu(L) is then a constant), the up rows
// are the identity (|u| ≤ 1 < L, unclamped) and fc2 = I / silu(L). Needs d = w = h.
void make_identity_experts(LayerCase& c) {
  const int h = c.config.hidden;
  const double limit = *c.config.swiglu_clamp;
  for (int e = 0; e < c.config.num_experts; ++e) {
    Matrix<double> fc1 = Matrix<double>::Zero(2 * h, h);
    fc1.block(0, h - 1, h, 1).setConstant(1000.0);
    fc1.bottomRows(h).setIdentity();
    c.params.expert_fc1[static_cast<size_t>(e)] = fc1;
    c.params.expert_fc2[static_cast<size_t>(e)] = Matrix<double>::Identity(h, h) / silu(limit);
  }
  c.inputs.x.col(h - 1).setOnes();
}

TEST(LayerInvariants, IdentityExpertsCombineToWeightedInput) {
  for (auto score : {ScoreFunction::softmax, ScoreFunction::sigmoid, ScoreFunction::sqrtsoftplus}) {
    MoeConfig cfg = small_config();
    cfg.score_function = score;
    cfg.ffn_hidden = cfg.hidden;
    cfg.swiglu_clamp = 10.0;
    cfg.topk = 3;
    cfg.shared_expert_ffn_hidden = 4;
    cfg.shared_expert_gate = true;
    LayerCase c = make_case(cfg, 5, 2, 11);
    make_identity_experts(c);
    const auto f = moe_forward(c.config, c.params, c.inputs);

    // Expected: y_t = (Σ_e p_{t,e})·x_t + the shared expert, computed here without the layer.
    for (Eigen::Index t = 0; t < c.inputs.x.rows(); ++t) {
      const double weight_sum = f.routing.probs.row(t).sum();
      const Vector<double> x = c.inputs.x.row(t).transpose();
      const Vector<double> pre = c.params.shared_fc1 * x;
      Vector<double> act(cfg.shared_expert_ffn_hidden);
      for (int i = 0; i < cfg.shared_expert_ffn_hidden; ++i) act(i) = silu(pre(i)) * pre(cfg.shared_expert_ffn_hidden + i);
      const double gate = sigmoid(c.params.shared_gate.row(0).dot(x));
      const Vector<double> expected = weight_sum * x + gate * (c.params.shared_fc2 * act);
      EXPECT_LT((f.y.row(t).transpose() - expected).cwiseAbs().maxCoeff(), 1e-12) << "token " << t;
    }
    // The weights themselves: softmax post sums to 1; megatron-renormalised sigmoid/sqrtsoftplus too (k > 1).
    EXPECT_NEAR(f.routing.probs.row(0).sum(), 1.0, 1e-12) << to_string(score);
  }
}

// A clamp at L = 0 is a clamp (DeepSeek-V4's swiglu_limit: 0, as transformers 5.25 applies it): up is clipped to 0,
// so every routed expert outputs 0 and passes no gradient; the layer is its shared expert alone. The config refused
// 0 before, and the Hugging Face mapping read it as "no clamp".
TEST(LayerInvariants, ClampAtZeroSilencesTheRoutedExperts) {
  MoeConfig cfg = small_config();
  cfg.swiglu_clamp = 0.0;
  cfg.shared_expert_ffn_hidden = 4;
  cfg.validate();
  LayerCase c = make_case(cfg, 5, 2, 17);
  const auto f = moe_forward(c.config, c.params, c.inputs);
  const auto g = moe_backward(c.config, c.params, c.inputs, f, c.grad_y);

  MoeConfig shared_only = cfg;  // the same layer with the routed experts' fc2 zero and no clamp
  shared_only.swiglu_clamp.reset();
  LayerCase z = c;
  z.config = shared_only;
  for (auto& fc2 : z.params.expert_fc2) fc2.setZero();
  const auto fz = moe_forward(z.config, z.params, z.inputs);
  EXPECT_EQ((f.y - fz.y).cwiseAbs().maxCoeff(), 0.0);
  EXPECT_GT(f.y.cwiseAbs().maxCoeff(), 0.0) << "the shared expert still contributes";
  for (size_t e = 0; e < g.params.expert_fc1.size(); ++e) {
    EXPECT_EQ(g.params.expert_fc1[e].cwiseAbs().maxCoeff(), 0.0) << "expert " << e;
    EXPECT_EQ(g.params.expert_fc2[e].cwiseAbs().maxCoeff(), 0.0) << "expert " << e;
  }
}

// With W_g = 0 every token sees equal scores, so P_e = T/E and aux = coeff·E/(kT²)·(T/E)·Σc = coeff·E/(kT²)·(T/E)·Tk
// = coeff, whatever the counts.
TEST(LayerInvariants, AuxLossEqualsCoefficientAtUniformLoad) {
  for (auto type : {AuxLossType::aux, AuxLossType::seq_aux, AuxLossType::global_aux}) {
    for (auto score : {ScoreFunction::softmax, ScoreFunction::sigmoid, ScoreFunction::sqrtsoftplus}) {
      MoeConfig cfg = small_config();
      cfg.score_function = score;
      cfg.aux_loss_type = type;
      cfg.aux_loss_coeff = 0.01;
      LayerCase c = make_case(cfg, 6, 3, 2);
      c.params.router_weight.setZero();
      EXPECT_NEAR(moe_forward(c.config, c.params, c.inputs).aux_loss, 0.01, 1e-15)
          << to_string(type) << " " << to_string(score);
    }
  }
}

TEST(LayerInvariants, AuxLossOfImbalancedLoadWorkedOut) {
  // A constant input column read ×3 by experts 0 and 1 only: logits [3, 3, 0, 0, 0, 0] for every token.
  // s' = σ(l)/Σσ: s'_0 = s'_1 = σ(3)/(2σ(3) + 4·½). Every token's top-2 is {0, 1}, so c_0 = c_1 = T.
  // aux = coeff·E/(kT²)·Σ P_e c_e = coeff·E/(kT²)·2·(T·s'_0)·T = coeff·(E/k)·2·s'_0 = coeff·3·σ(3)/(σ(3) + 1)
  // ≈ 1.464·coeff: above coeff, as an imbalanced load must be.
  MoeConfig cfg = small_config();
  cfg.aux_loss_type = AuxLossType::aux;
  cfg.aux_loss_coeff = 0.01;
  LayerCase c = make_case(cfg, 6, 1, 2);
  c.inputs.x.col(0).setOnes();
  c.params.router_weight.setZero();
  c.params.router_weight(0, 0) = c.params.router_weight(1, 0) = 3.0;
  const double s3 = sigmoid(3.0);
  EXPECT_NEAR(moe_forward(c.config, c.params, c.inputs).aux_loss, 0.01 * 3 * s3 / (s3 + 1), 1e-15);
}

TEST(LayerInvariants, GlobalAuxOnOneMicrobatchEqualsAuxAndAccumulates) {
  MoeConfig cfg = small_config();
  cfg.aux_loss_type = AuxLossType::aux;
  cfg.aux_loss_coeff = 0.1;
  LayerCase c = make_case(cfg, 6, 2, 9);
  const double aux = moe_forward(c.config, c.params, c.inputs).aux_loss;
  c.config.aux_loss_type = AuxLossType::global_aux;
  const auto first = moe_forward(c.config, c.params, c.inputs);
  EXPECT_NEAR(first.aux_loss, aux, 1e-15);
  EXPECT_EQ(first.global_aux.steps, 1);
  // A second identical microbatch: accumulated counts / 2 = the same counts, so the same loss, and steps = 2.
  c.inputs.global_aux = first.global_aux;
  const auto second = moe_forward(c.config, c.params, c.inputs);
  EXPECT_NEAR(second.aux_loss, aux, 1e-15);
  EXPECT_EQ(second.global_aux.steps, 2);
  EXPECT_EQ(second.global_aux.tokens_per_expert_sum[0], 2 * first.global_aux.tokens_per_expert_sum[0]);
}

TEST(LayerInvariants, SeqAuxEqualsAuxForOneSequence) {
  MoeConfig cfg = small_config();
  cfg.aux_loss_type = AuxLossType::aux;
  cfg.aux_loss_coeff = 0.1;
  LayerCase c = make_case(cfg, 8, 1, 4);
  const double aux = moe_forward(c.config, c.params, c.inputs).aux_loss;
  c.config.aux_loss_type = AuxLossType::seq_aux;
  EXPECT_NEAR(moe_forward(c.config, c.params, c.inputs).aux_loss, aux, 1e-15);
}

TEST(LayerInvariants, ZLossOfZeroLogitsIsCoeffTimesLogESquared) {
  // logits 0 → logsumexp = ln E for every token → z = coeff·(ln E)².
  MoeConfig cfg = small_config();
  cfg.z_loss_coeff = 0.5;
  LayerCase c = make_case(cfg, 4, 1, 4);
  c.params.router_weight.setZero();
  const double lnE = std::log(6.0);
  EXPECT_NEAR(moe_forward(c.config, c.params, c.inputs).z_loss, 0.5 * lnE * lnE, 1e-14);
}

TEST(LayerInvariants, BiasUpdateMovesOverAndUnderloadedExpertsOppositeWays) {
  // Counts [5, 1, 3, 3]: mean 3; expert 0 is overloaded (−rate), 1 underloaded (+rate), 2 and 3 exact (0).
  Vector<double> bias(4);
  bias << 0.1, 0.1, 0.1, 0.1;
  const auto updated = updated_expert_bias<double>(bias, {5, 1, 3, 3}, 0.001);
  EXPECT_DOUBLE_EQ(updated(0), 0.099);
  EXPECT_DOUBLE_EQ(updated(1), 0.101);
  EXPECT_DOUBLE_EQ(updated(2), 0.1);
  EXPECT_DOUBLE_EQ(updated(3), 0.1);
}

TEST(LayerInvariants, BiasUpdateCountsRealAssignmentsOnly) {
  // In the layer: padded tokens and padded capacity slots are not assignments.
  MoeConfig cfg = small_config();
  cfg.expert_bias = true;
  cfg.bias_update_rate = 0.01;
  cfg.capacity_factor = 2.0;
  cfg.pad_to_capacity = true;
  LayerCase c = make_case(cfg, 4, 2, 6);
  c.inputs.padding_mask = {false, false, false, false, false, false, true, true};
  const auto f = moe_forward(c.config, c.params, c.inputs);
  std::int64_t assignments = 0, rows = 0;
  for (int e = 0; e < cfg.num_experts; ++e) {
    assignments += f.routing.bias_counts[static_cast<size_t>(e)];
    rows += f.routing.tokens_per_expert[static_cast<size_t>(e)];
  }
  EXPECT_EQ(assignments, 6 * 2);  // 6 real tokens × k = 2, nothing dropped at cf 2
  EXPECT_GT(rows, assignments + 2 * 2);  // padded slots (and the 2 padded tokens) are GEMM rows
  EXPECT_EQ(f.expert_bias_updated, updated_expert_bias<double>(c.params.expert_bias, f.routing.bias_counts, 0.01));
}

TEST(LayerInvariants, FloatAgreesWithDouble) {
  const auto& preset = layer_preset("tiny-v4");
  const auto pd = random_params<double>(preset.config, preset.vocab, 3);
  const auto id = random_inputs<double>(preset.config, 8, 2, preset.vocab, 4);
  const auto gd = random_grad_y<double>(preset.config, 16, 5);
  const auto fd = moe_forward(preset.config, pd, id);
  const auto bd = moe_backward(preset.config, pd, id, fd, gd);

  const auto pf = random_params<float>(preset.config, preset.vocab, 3);
  const auto in_f = random_inputs<float>(preset.config, 8, 2, preset.vocab, 4);
  const auto gf = random_grad_y<float>(preset.config, 16, 5);
  const auto ff = moe_forward(preset.config, pf, in_f);
  const auto bf = moe_backward(preset.config, pf, in_f, ff, gf);

  ASSERT_EQ(ff.routing.routing_map, fd.routing.routing_map);
  EXPECT_LT((ff.y.cast<double>() - fd.y).cwiseAbs().maxCoeff(), 1e-5);
  EXPECT_LT((bf.x.cast<double>() - bd.x).cwiseAbs().maxCoeff(), 1e-5);
  EXPECT_LT((bf.params.router_weight.cast<double>() - bd.params.router_weight).cwiseAbs().maxCoeff(), 1e-5);
  EXPECT_NEAR(ff.aux_loss, fd.aux_loss, 1e-8);
}

void expect_rejected(const LayerCase& c, const std::string& fragment) {
  test::expect_error(fragment, [&] { (void)moe_forward(c.config, c.params, c.inputs); });
}

TEST(LayerInvariants, BoundaryRejectsBadShapesAndTables) {
  MoeConfig cfg = small_config();
  LayerCase c = make_case(cfg, 4, 2, 1);
  c.params.expert_fc2[3].resize(2, 2);
  expect_rejected(c, "expert_fc2[3] must have shape [6, 4]");

  c = make_case(cfg, 4, 2, 1);
  c.inputs.x.resize(7, 6);
  expect_rejected(c, "x (rows = seq·batch) must have shape [8, 6]");

  c = make_case(cfg, 4, 2, 1);
  c.params.shared_fc1.resize(2, 6);
  expect_rejected(c, "shared_fc1 is given but the config has no shared expert");

  c = make_case(cfg, 4, 2, 1);
  c.inputs.partition = {{0, 1, 2, 3}, {3, 4, 5, 6, 7}};
  expect_rejected(c, "partition must cover every row exactly once (row 3 appears 2 times)");

  cfg.hash_routing = true;
  c = make_case(cfg, 4, 2, 1);
  c.params.tid2eid(2, 1) = c.params.tid2eid(2, 0);
  expect_rejected(c, "tid2eid[2] names expert");

  c = make_case(cfg, 4, 2, 1);
  c.inputs.input_ids(1, 3) = 99;
  expect_rejected(c, "input id 99 is outside the tid2eid table");
}

}  // namespace
}  // namespace moe::test
