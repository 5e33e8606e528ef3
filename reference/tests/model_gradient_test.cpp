// End-to-end finite differences of the model oracle: embedding → blocks (one hash layer, one score layer, aux
// and z losses on) → final norm → head → masked cross-entropy, for L = w_ce·CE + w_aux·Σaux + w_z·Σz.
#include "reference/model.hpp"
#include "reference/tolerance.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
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

// Central differences of up to 12 entries of every trained tensor; returns the names of the tensors checked.
std::vector<std::string> check_against_central_differences(const ModelConfig& config,
                                                           const std::vector<double>& mtp_weights = {}) {
  std::vector<std::string> names;
  ModelParams<double> params = random_model_params<double>(config, 21);
  TokenBatch batch = random_token_batch(config, 4, 2, 22);
  batch.loss_mask(1, 3) = false;  // one padded token: out of the CE, the aux statistics and the z mean
  ModelLossWeights weights{0.7, 1.3, 0.5};
  weights.mtp = mtp_weights;
  auto loss = [&](const ModelForward<double>& f) {
    double mtp = 0;  // unset weights: λ/D of the CE's
    for (size_t k = 0; k < f.mtp.size(); ++k)
      mtp += (mtp_weights.empty() ? weights.ce * config.mtp_loss_scale / config.mtp_depth : mtp_weights[k]) *
             f.mtp[k].ce_sum;
    return weights.ce * f.ce_sum + weights.aux * f.aux_sum + weights.z * f.z_sum + mtp;
  };

  const auto f0 = model_forward(config, params, batch);
  EXPECT_GT(f0.aux_sum, 0.0);
  EXPECT_GT(f0.z_sum, 0.0);
  const auto g = model_backward(config, params, batch, f0, weights);
  const double h = 1e-6;
  int checked = 0;
  ModelParams<double> grads = g;
  const auto values = trained_tensors(config, params);
  const auto analytic = trained_tensors(config, grads);
  for (size_t v = 0; v < values.size(); ++v) {
    names.push_back(values[v].name);
    const Eigen::Index count = std::min<Eigen::Index>(values[v].size, 12);
    for (Eigen::Index k = 0; k < count; ++k) {
      const Eigen::Index i = k * values[v].size / count;
      double* value = values[v].data;
      const double saved = value[i];
      value[i] = saved + h;
      const auto fp = model_forward(config, params, batch);
      value[i] = saved - h;
      const auto fm = model_forward(config, params, batch);
      value[i] = saved;
      for (size_t l = 0; l < f0.layers.size(); ++l)
        EXPECT_TRUE(fp.layers[l].routing.routing_map == f0.layers[l].routing.routing_map &&
                    fm.layers[l].routing.routing_map == f0.layers[l].routing.routing_map)
            << values[v].name << "[" << i << "] moved layer " << l << "'s routing";
      const double numeric = (loss(fp) - loss(fm)) / (2 * h);
      EXPECT_LE(tolerance(Compared::finite_difference, Precision::float64).ratio(analytic[v].data[i], numeric), 1.0)
          << values[v].name << "[" << i << "]: " << analytic[v].data[i] << " vs " << numeric;
      ++checked;
    }
  }
  EXPECT_GT(checked, 200);
  return names;
}

class ModelGradientCheck : public ::testing::TestWithParam<AuxLossType> {};

TEST_P(ModelGradientCheck, EmbeddingToLossMatchesCentralDifferences) {
  check_against_central_differences(tiny_model(GetParam()));
}

// Two MTP depths (their own norms, projection, block and final norm; the shared embedding and head), without and
// with attention, with the default λ/D weights and with a weight of each depth's own.
TEST(ModelGradient, MultiTokenPredictionMatchesCentralDifferences) {
  ModelConfig config = tiny_model(AuxLossType::aux);
  config.mtp_depth = 2;
  config.mtp_loss_scale = 0.3;
  std::vector<std::string> names = check_against_central_differences(config);
  for (const char* n : {"mtp0.enorm", "mtp0.hnorm", "mtp0.eh_proj", "mtp1.router_weight", "mtp1.expert_fc2[5]",
                        "mtp1.shared_fc1", "mtp1.final_norm"})
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
  config.attention = {.heads = 2, .groups = 1, .head_dim = 4};
  names = check_against_central_differences(config, {0.4, 0.9});
  EXPECT_NE(std::find(names.begin(), names.end(), "mtp1.attention_wq"), names.end());
}

TEST(Model, RolledBatchShiftsIdsLabelsAndMask) {
  TokenBatch b;
  b.seq = 4;
  b.batch = 1;
  b.input_ids = IndexMatrix{{5, 6, 7, 8}};
  b.labels = IndexMatrix{{6, 7, 8, 9}};
  b.loss_mask = BoolMatrix{{true, true, false, true}};
  const TokenBatch r = rolled_batch(b, 2);
  EXPECT_EQ(r.input_ids, (IndexMatrix{{7, 8, 0, 0}}));
  EXPECT_EQ(r.labels, (IndexMatrix{{8, 9, 0, 0}}));
  EXPECT_EQ(r.loss_mask, (BoolMatrix{{false, true, false, false}}));
}

// The pre-norm blocks with attention (GQA: 4 heads over 2 groups): every attention weight and norm, and every
// tensor below them, whose gradients now pass through the attention's backward.
TEST(ModelGradient, AttentionBlocksMatchCentralDifferences) {
  ModelConfig config = tiny_model(AuxLossType::seq_aux);
  config.attention = {.heads = 4, .groups = 2, .head_dim = 4};
  const std::vector<std::string> names = check_against_central_differences(config);
  for (const char* n : {"layer0.attention_norm", "layer0.attention_wq", "layer1.attention_wk", "layer1.attention_wv",
                        "layer1.attention_wo"})
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
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
