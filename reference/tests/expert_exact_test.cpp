// Small expert-side cases worked out by hand: the SwiGLU clamp and its masked gradient, probabilities on the
// input versus after the activation, and the latent projection around the routed branch.
#include "reference/swiglu.hpp"
#include "layer_fixture.hpp"

#include <gtest/gtest.h>

#include <cmath>

namespace moe::test {
namespace {

double sig(double x) { return 1.0 / (1.0 + std::exp(-x)); }

TEST(ExpertExact, ClampCapsGateAboveAndUpBothWays) {
  // L = 2, d = 2. Column 0: gate 3 → 2, up −5 → −2: act = silu(2)·(−2) = −4σ(2), both gradients masked.
  // Column 1: gate 1, up 0.5 (inside): act = silu(1)·0.5; d act/d gate = 0.5·silu'(1), d act/d up = silu(1),
  // with silu'(x) = σ(x)(1 + x(1 − σ(x))).
  Vector<double> pre(4);
  pre << 3.0, 1.0, -5.0, 0.5;
  const Vector<double> act = swiglu_activation<double>(pre, 2.0);
  EXPECT_NEAR(act(0), -4.0 * sig(2.0), 1e-15);
  EXPECT_NEAR(act(1), sig(1.0) * 0.5, 1e-15);

  const Vector<double> grad = swiglu_activation_backward<double>(pre, 2.0, false, Vector<double>::Ones(2));
  EXPECT_EQ(grad(0), 0.0);  // gate above L
  EXPECT_EQ(grad(2), 0.0);  // up below −L
  EXPECT_NEAR(grad(1), 0.5 * sig(1.0) * (1.0 + 1.0 * (1.0 - sig(1.0))), 1e-15);
  EXPECT_NEAR(grad(3), sig(1.0), 1e-15);

  // The gate has no lower bound: −30 passes through (silu(−30) ≈ −2.8e−12, not silu(−2)).
  Vector<double> low(2);
  low << -30.0, 1.0;
  EXPECT_NEAR(swiglu_activation<double>(low, 2.0)(0), -30.0 * sig(-30.0), 1e-25);
}

// One token, h = w = d = 1, two experts, sigmoid k = 1 (megatron: p = σ(l), unnormalised).
// W_g = [0.5, −0.5] and x = 2 → logits [1, −1] → expert 0 with p = σ(1).
// fc1 = [1; 1] (gate = up = input), fc2 = [1]:
//   after the activation: y = p·silu(x)·x       = σ(1)·silu(2)·2
//   on the input:         y = silu(p·x)·(p·x)   = silu(2σ(1))·2σ(1)
LayerCase scalar_expert_case(bool probs_on_input) {
  MoeConfig c;
  c.hidden = 1;
  c.num_experts = 2;
  c.topk = 1;
  c.ffn_hidden = 1;
  c.score_function = ScoreFunction::sigmoid;
  c.apply_probs_on_input = probs_on_input;
  LayerCase lc = make_case(c, 1, 1, 3);
  lc.params.router_weight << 0.5, -0.5;
  lc.inputs.x << 2.0;
  for (int e = 0; e < 2; ++e) {
    lc.params.expert_fc1[static_cast<size_t>(e)] << 1.0, 1.0;
    lc.params.expert_fc2[static_cast<size_t>(e)] << 1.0;
  }
  return lc;
}

TEST(ExpertExact, ProbsOnInputIsADifferentFunction) {
  const double p = sig(1.0);
  auto after = scalar_expert_case(false);
  EXPECT_NEAR(moe_forward(after.config, after.params, after.inputs).y(0, 0), p * (2.0 * sig(2.0)) * 2.0, 1e-15);
  auto before = scalar_expert_case(true);
  const double px = 2.0 * p;
  EXPECT_NEAR(moe_forward(before.config, before.params, before.inputs).y(0, 0), px * sig(px) * px, 1e-15);
}

TEST(ExpertExact, LatentProjectionWrapsTheRoutedBranch) {
  // Identity-like experts in the latent width (see invariants_test): u = D·x whose last entry is the constant
  // 1 (D's last row reads x's constant last column), F_e(u) = p·u. Then y_t = (Σ_e p_{t,e})·U·D·x_t.
  MoeConfig c = small_config();
  c.latent_size = 3;
  c.ffn_hidden = 3;
  c.swiglu_clamp = 10.0;
  LayerCase lc = make_case(c, 3, 2, 8);
  const int l = c.latent_size, h = c.hidden;
  lc.inputs.x.col(h - 1).setOnes();
  lc.params.latent_down.row(l - 1).setZero();
  lc.params.latent_down(l - 1, h - 1) = 1.0;
  for (int e = 0; e < c.num_experts; ++e) {
    Matrix<double> fc1 = Matrix<double>::Zero(2 * l, l);
    fc1.block(0, l - 1, l, 1).setConstant(1000.0);
    fc1.bottomRows(l).setIdentity();
    lc.params.expert_fc1[static_cast<size_t>(e)] = fc1;
    lc.params.expert_fc2[static_cast<size_t>(e)] = Matrix<double>::Identity(l, l) / (10.0 * sig(10.0));
  }
  // |u| must stay inside the clamp for the up half to be linear.
  ASSERT_LT((lc.inputs.x * lc.params.latent_down.transpose()).cwiseAbs().maxCoeff(), 10.0);
  const auto f = moe_forward(lc.config, lc.params, lc.inputs);
  for (Eigen::Index t = 0; t < lc.inputs.x.rows(); ++t) {
    const Vector<double> expected =
        f.routing.probs.row(t).sum() * lc.params.latent_up * lc.params.latent_down * lc.inputs.x.row(t).transpose();
    EXPECT_LT((f.y.row(t).transpose() - expected).cwiseAbs().maxCoeff(), 1e-12) << "token " << t;
  }
}

TEST(ExpertExact, ZeroTokenExpertHasZeroGradient) {
  // Route every token away from expert 5 (a large negative logit): its weights get exactly zero gradient.
  MoeConfig c = small_config();
  LayerCase lc = make_case(c, 4, 2, 2);
  lc.inputs.x.col(0).setOnes();
  lc.params.router_weight.row(5).setZero();
  lc.params.router_weight(5, 0) = -50.0;
  const auto f = moe_forward(lc.config, lc.params, lc.inputs);
  ASSERT_EQ(f.routing.tokens_per_expert[5], 0);
  const auto g = moe_backward(lc.config, lc.params, lc.inputs, f, lc.grad_y);
  EXPECT_EQ(g.params.expert_fc1[5].cwiseAbs().maxCoeff(), 0.0);
  EXPECT_EQ(g.params.expert_fc2[5].cwiseAbs().maxCoeff(), 0.0);
  EXPECT_GT(g.params.expert_fc1[0].cwiseAbs().maxCoeff() + g.params.expert_fc1[1].cwiseAbs().maxCoeff(), 0.0);
}

}  // namespace
}  // namespace moe::test
