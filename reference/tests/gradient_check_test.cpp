// Finite-difference checks of the layer backward: for every option of the oracle, central differences of
// L = Σ⟨grad_y, y⟩ + aux_scale·aux + z_scale·z against the analytic gradient of x and every parameter.
//
// Selection is piecewise constant; a perturbation that changes the routing map would make the difference
// meaningless, so each check also asserts the map did not move (the seeds are chosen away from ties).
#include "reference/presets.hpp"
#include "reference/swiglu.hpp"
#include "reference/tolerance.hpp"
#include "layer_fixture.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

namespace moe::test {
namespace {

struct GradCase {
  std::string name;
  MoeConfig config;
  int seq = 4;
  int batch = 2;
  std::uint64_t seed = 1;
  bool with_padding = false;     // pads the last token of every sequence
  bool with_global_state = false;  // global_aux: counts from two earlier microbatches
  LossScales scales{};
};

// gtest prints parameters on failure: the name is what identifies a case.
void PrintTo(const GradCase& g, std::ostream* os) { *os << g.name; }

MoeConfig with(MoeConfig c, const std::function<void(MoeConfig&)>& change) {
  change(c);
  return c;
}

std::vector<GradCase> grad_cases() {
  const MoeConfig base = small_config();
  std::vector<GradCase> cases;
  auto add = [&](std::string name, const std::function<void(MoeConfig&)>& change) {
    GradCase g;
    g.name = std::move(name);
    g.config = with(base, change);
    cases.push_back(g);
    return &cases.back();
  };
  add("softmax_post", [](MoeConfig& c) { c.score_function = ScoreFunction::softmax; });
  add("softmax_pre", [](MoeConfig& c) { c.score_function = ScoreFunction::softmax; c.pre_softmax = true; });
  add("softmax_pre_k1", [](MoeConfig& c) {
    c.score_function = ScoreFunction::softmax; c.pre_softmax = true; c.topk = 1; });
  add("sigmoid_scaled", [](MoeConfig& c) { c.topk_scaling_factor = 2.5; });
  add("sigmoid_k1_unnormalised", [](MoeConfig& c) { c.topk = 1; });
  add("sigmoid_deepseek", [](MoeConfig& c) { c.normalization = Normalization::deepseek; c.topk = 3; });
  add("sqrtsoftplus_megatron", [](MoeConfig& c) { c.score_function = ScoreFunction::sqrtsoftplus; c.topk = 3; });
  add("sqrtsoftplus_k1_deepseek", [](MoeConfig& c) {
    c.score_function = ScoreFunction::sqrtsoftplus; c.topk = 1; c.normalization = Normalization::deepseek; });
  add("bias_and_groups", [](MoeConfig& c) { c.expert_bias = true; c.num_groups = 3; c.group_topk = 1; });
  add("hash_sqrtsoftplus", [](MoeConfig& c) {
    c.hash_routing = true; c.score_function = ScoreFunction::sqrtsoftplus; c.topk_scaling_factor = 1.5; });
  add("hash_softmax", [](MoeConfig& c) { c.hash_routing = true; c.score_function = ScoreFunction::softmax; });
  add("hash_sigmoid_k1", [](MoeConfig& c) { c.hash_routing = true; c.topk = 1; });
  add("clamp_routed_and_shared", [](MoeConfig& c) {
    c.swiglu_clamp = 0.3; c.shared_expert_ffn_hidden = 5; c.shared_expert_clamp = true; });
  add("shared_gate", [](MoeConfig& c) { c.shared_expert_ffn_hidden = 5; c.shared_expert_gate = true; });
  add("latent", [](MoeConfig& c) { c.latent_size = 3; });
  add("probs_on_input_sigmoid", [](MoeConfig& c) { c.topk = 1; c.apply_probs_on_input = true; });
  add("probs_on_input_softmax", [](MoeConfig& c) {
    c.score_function = ScoreFunction::softmax; c.pre_softmax = true; c.topk = 1; c.apply_probs_on_input = true; });
  add("capacity_probs", [](MoeConfig& c) { c.capacity_factor = 0.75; });
  add("capacity_position", [](MoeConfig& c) { c.capacity_factor = 0.75; c.drop_policy = DropPolicy::position; });
  add("capacity_pad", [](MoeConfig& c) { c.capacity_factor = 1.5; c.pad_to_capacity = true; });
  add("aux", [](MoeConfig& c) { c.aux_loss_type = AuxLossType::aux; c.aux_loss_coeff = 0.3; });
  add("aux_softmax", [](MoeConfig& c) {
    c.score_function = ScoreFunction::softmax; c.aux_loss_type = AuxLossType::aux; c.aux_loss_coeff = 0.3; });
  add("seq_aux_sqrtsoftplus", [](MoeConfig& c) {
    c.score_function = ScoreFunction::sqrtsoftplus; c.aux_loss_type = AuxLossType::seq_aux; c.aux_loss_coeff = 0.5; });
  add("global_aux", [](MoeConfig& c) { c.aux_loss_type = AuxLossType::global_aux; c.aux_loss_coeff = 0.2; })
      ->with_global_state = true;
  add("z_loss", [](MoeConfig& c) { c.z_loss_coeff = 0.1; });
  add("losses_padded_and_scaled", [](MoeConfig& c) {
    c.aux_loss_type = AuxLossType::seq_aux; c.aux_loss_coeff = 0.4; c.z_loss_coeff = 0.2; });
  cases.back().with_padding = true;
  cases.back().scales = {0.3, 2.0};

  GradCase v4{"tiny_v4_preset", layer_preset("tiny-v4").config, 4, 2, 3};
  v4.config.aux_loss_coeff = 0.1;  // make the seq_aux term visible next to ⟨grad_y, y⟩
  v4.config.swiglu_clamp = 0.5;    // and the clamp active
  cases.push_back(v4);
  GradCase v3{"tiny_v3_preset", layer_preset("tiny-v3").config, 4, 2, 4};
  cases.push_back(v3);
  return cases;
}

LayerCase build(const GradCase& g) {
  LayerCase c = make_case(g.config, g.seq, g.batch, g.seed);
  c.scales = g.scales;
  if (g.with_padding) {
    c.inputs.padding_mask.assign(static_cast<size_t>(g.seq * g.batch), false);
    for (int b = 0; b < g.batch; ++b) c.inputs.padding_mask[static_cast<size_t>((g.seq - 1) * g.batch + b)] = true;
  }
  if (g.with_global_state) {
    c.inputs.global_aux.steps = 2;
    for (int e = 0; e < g.config.num_experts; ++e) c.inputs.global_aux.tokens_per_expert_sum.push_back(3.0 + e);
  }
  return c;
}

// Entries to probe: all of a small tensor, an even spread of 48 of a large one.
std::vector<Eigen::Index> probe_entries(Eigen::Index size) {
  std::vector<Eigen::Index> idx;
  const Eigen::Index count = std::min<Eigen::Index>(size, 48);
  for (Eigen::Index i = 0; i < count; ++i) idx.push_back(i * size / count);
  return idx;
}

class LayerGradientCheck : public ::testing::TestWithParam<GradCase> {};

// On both paths of the experts: the per-token definition and the expert-batched fast path.
TEST_P(LayerGradientCheck, MatchesCentralDifferences) {
  for (const ExpertPath path : {ExpertPath::per_token, ExpertPath::expert_batched}) {
    SCOPED_TRACE(std::string(to_string(path)));
    LayerCase c = build(GetParam());
    const MoeForward<double> f0 = moe_forward(c.config, c.params, c.inputs, path);
    const MoeGradients<double> g = moe_backward(c.config, c.params, c.inputs, f0, c.grad_y, c.scales, path);
    const double h = 1e-6;
    int checked = 0;

    for_each_tensor(c, g, [&](const std::string& name, Matrix<double>& value, const Matrix<double>& grad) {
      ASSERT_EQ(grad.rows(), value.rows()) << name;
      ASSERT_EQ(grad.cols(), value.cols()) << name;
      for (Eigen::Index i : probe_entries(value.size())) {
        const double saved = value.data()[i];
        value.data()[i] = saved + h;
        const MoeForward<double> fp = moe_forward(c.config, c.params, c.inputs, path);
        value.data()[i] = saved - h;
        const MoeForward<double> fm = moe_forward(c.config, c.params, c.inputs, path);
        value.data()[i] = saved;
        ASSERT_TRUE(fp.routing.routing_map == f0.routing.routing_map && fm.routing.routing_map == f0.routing.routing_map)
            << name << "[" << i << "]: the perturbation moved the routing map; pick a seed away from ties";
        const double numeric = (layer_loss(c, fp) - layer_loss(c, fm)) / (2 * h);
        const double analytic = grad.data()[i];
        EXPECT_LE(tolerance(Compared::finite_difference, Precision::float64).ratio(analytic, numeric), 1.0)
            << name << "[" << i << "]: " << analytic << " vs " << numeric;
        ++checked;
      }
    });
    EXPECT_GT(checked, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(EveryOption, LayerGradientCheck, ::testing::ValuesIn(grad_cases()),
                         [](const auto& param_info) { return param_info.param.name; });

// The clamp case must really clamp (and stay away from the kink), or its gradient check proves nothing.
TEST(LayerGradientCheck, ClampCaseHasActiveClampAwayFromKink) {
  GradCase clamp_case;
  for (const auto& g : grad_cases())
    if (g.name == "clamp_routed_and_shared") clamp_case = g;
  const LayerCase c = build(clamp_case);
  const auto f = moe_forward(c.config, c.params, c.inputs);
  const double limit = *c.config.swiglu_clamp;
  int clamped = 0;
  double margin = 1e9;
  for (Eigen::Index t = 0; t < c.inputs.x.rows(); ++t) {
    for (int e = 0; e < c.config.num_experts; ++e) {
      if (!f.routing.routing_map(t, e)) continue;
      const Vector<double> pre = c.params.expert_fc1[static_cast<size_t>(e)] * c.inputs.x.row(t).transpose();
      for (Eigen::Index i = 0; i < pre.size(); ++i) {
        const bool gate = i < c.config.ffn_hidden;
        clamped += gate ? pre(i) > limit : std::abs(pre(i)) > limit;
        margin = std::min(margin, std::abs(std::abs(pre(i)) - limit));
        if (gate) margin = std::min(margin, std::abs(pre(i) - limit));
      }
    }
  }
  EXPECT_GT(clamped, 5);
  EXPECT_GT(margin, 1e-4);
}

}  // namespace
}  // namespace moe::test
