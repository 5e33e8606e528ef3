// End-to-end finite differences of the model oracle: embedding → blocks (one hash layer, one score layer, aux
// and z losses on) → final norm → head → masked cross-entropy, for L = w_ce·CE + w_aux·Σaux + w_z·Σz.
#include "reference/model.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>

namespace moe {
namespace {

ModelConfig tiny_model(AuxLossType aux) {
  ModelConfig m;
  m.layer.hidden = 6;
  m.layer.num_experts = 6;
  m.layer.topk = 2;
  m.layer.ffn_hidden = 4;
  m.layer.score_function = ScoreFunction::sqrtsoftplus;
  m.layer.topk_scaling_factor = 1.5;
  m.layer.expert_bias = true;
  m.layer.bias_update_rate = 1e-3;
  m.layer.shared_expert_ffn_hidden = 3;
  m.layer.aux_loss_type = aux;
  m.layer.aux_loss_coeff = 0.3;
  m.layer.z_loss_coeff = 0.05;
  m.num_layers = 2;
  m.n_hash_layers = 1;
  m.vocab = 10;
  return m;
}

// Every tensor is visited as (name, its data, its size, the gradient's data): the check perturbs the data in place.
using Visit = std::function<void(const std::string&, double*, Eigen::Index, const double*, Eigen::Index)>;

template <typename M>
void visit(const Visit& v, const std::string& name, M& value, const M& grad) {
  v(name, value.data(), value.size(), grad.data(), grad.size());
}

void for_each_param(ModelParams<double>& p, const ModelParams<double>& g, const Visit& v) {
  visit(v, "embedding", p.embedding, g.embedding);
  visit(v, "head", p.head, g.head);
  visit(v, "final_norm", p.final_norm, g.final_norm);
  for (size_t l = 0; l < p.layers.size(); ++l) {
    const std::string pre = "layer" + std::to_string(l) + ".";
    visit(v, pre + "block_norm", p.block_norm[l], g.block_norm[l]);
    visit(v, pre + "router_weight", p.layers[l].router_weight, g.layers[l].router_weight);
    visit(v, pre + "expert_fc1[1]", p.layers[l].expert_fc1[1], g.layers[l].expert_fc1[1]);
    visit(v, pre + "expert_fc2[4]", p.layers[l].expert_fc2[4], g.layers[l].expert_fc2[4]);
    visit(v, pre + "shared_fc1", p.layers[l].shared_fc1, g.layers[l].shared_fc1);
    visit(v, pre + "shared_fc2", p.layers[l].shared_fc2, g.layers[l].shared_fc2);
  }
}

class ModelGradientCheck : public ::testing::TestWithParam<AuxLossType> {};

TEST_P(ModelGradientCheck, EmbeddingToLossMatchesCentralDifferences) {
  const ModelConfig config = tiny_model(GetParam());
  ModelParams<double> params = random_model_params<double>(config, 21);
  TokenBatch batch = random_token_batch(config, 4, 2, 22);
  batch.loss_mask(1, 3) = false;  // one padded token: out of the CE, the aux statistics and the z mean
  const ModelLossWeights weights{0.7, 1.3, 0.5};
  auto loss = [&](const ModelForward<double>& f) {
    return weights.ce * f.ce_sum + weights.aux * f.aux_sum + weights.z * f.z_sum;
  };

  const auto f0 = model_forward(config, params, batch);
  ASSERT_GT(f0.aux_sum, 0.0);
  ASSERT_GT(f0.z_sum, 0.0);
  const auto g = model_backward(config, params, batch, f0, weights);
  const double h = 1e-6;
  int checked = 0;
  auto check = [&](const std::string& name, double* value, Eigen::Index size, const double* grad,
                   Eigen::Index grad_size) {
    ASSERT_EQ(grad_size, size) << name;
    const Eigen::Index count = std::min<Eigen::Index>(size, 24);
    for (Eigen::Index k = 0; k < count; ++k) {
      const Eigen::Index i = k * size / count;
      const double saved = value[i];
      value[i] = saved + h;
      const auto fp = model_forward(config, params, batch);
      value[i] = saved - h;
      const auto fm = model_forward(config, params, batch);
      value[i] = saved;
      for (size_t l = 0; l < f0.layers.size(); ++l)
        ASSERT_TRUE(fp.layers[l].routing.routing_map == f0.layers[l].routing.routing_map &&
                    fm.layers[l].routing.routing_map == f0.layers[l].routing.routing_map)
            << name << "[" << i << "] moved layer " << l << "'s routing";
      const double numeric = (loss(fp) - loss(fm)) / (2 * h);
      EXPECT_NEAR(grad[i], numeric, 1e-7 + 1e-6 * std::abs(numeric)) << name << "[" << i << "]";
      ++checked;
    }
  };
  for_each_param(params, g, check);
  EXPECT_GT(checked, 200);
}

INSTANTIATE_TEST_SUITE_P(AuxTypes, ModelGradientCheck,
                         ::testing::Values(AuxLossType::aux, AuxLossType::seq_aux, AuxLossType::global_aux),
                         [](const auto& param_info) { return std::string(to_string(param_info.param)); });

TEST(Model, HashLayersDropBiasAndGroups) {
  ModelConfig m = tiny_model(AuxLossType::aux);
  EXPECT_TRUE(m.layer_config(0).hash_routing);
  EXPECT_FALSE(m.layer_config(0).expert_bias);
  EXPECT_FALSE(m.layer_config(0).bias_update_rate.has_value());
  EXPECT_FALSE(m.layer_config(1).hash_routing);
  EXPECT_TRUE(m.layer_config(1).expert_bias);
  m.n_hash_layers = 3;
  EXPECT_THROW(m.validate(), std::invalid_argument);
}

}  // namespace
}  // namespace moe
