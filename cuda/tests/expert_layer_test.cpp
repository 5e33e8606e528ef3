// The device layer's forward and backward (expert_layer.hpp: route → permute → grouped SwiGLU → unpermute and back,
// everything on the device; the code cuda_bench times) against the oracle's moe_forward / moe_backward in double,
// through compare_device_layer (what `check --kernels cuda` runs): softmax, sigmoid with the clamp and an expert
// bias, sqrt-softplus with groups; in double and float, on cuBLAS and the batch-invariant GEMM. And on the CPU: how
// a layer of the check's set becomes its routed experts.
#include "cuda/device_layer_check.hpp"
#include "cuda/tests/gpu_test.hpp"

namespace moe::cuda {
namespace {

MoeConfig layer(ScoreFunction score) {
  MoeConfig c;
  c.hidden = 32;
  c.num_experts = 8;
  c.topk = 2;
  c.ffn_hidden = 24;
  c.score_function = score;
  return c;
}

std::vector<MoeConfig> layers() {
  MoeConfig sigmoid = layer(ScoreFunction::sigmoid);
  sigmoid.swiglu_clamp = 0.4;
  sigmoid.expert_bias = true;
  MoeConfig grouped = layer(ScoreFunction::sqrtsoftplus);
  grouped.num_groups = 4;
  grouped.group_topk = 2;
  return {layer(ScoreFunction::softmax), sigmoid, grouped};
}

void expect_layers_match(Precision precision, GemmMode mode) {
  for (const MoeConfig& c : layers()) {
    const DeviceLayerComparison r = compare_device_layer(c, 40, 7, precision, mode);
    EXPECT_TRUE(r.pass) << to_string(c.score_function) << ": " << r.first_failure;
    EXPECT_EQ(r.max_abs.size(), 5u);
  }
}

TEST(CudaExpertLayer, ForwardAndBackwardMatchTheOracleDouble) {
  MOE_REQUIRE_GPU();
  expect_layers_match(Precision::float64, GemmMode::cublas);
  expect_layers_match(Precision::float64, GemmMode::batch_invariant);
}
TEST(CudaExpertLayer, ForwardAndBackwardMatchTheOracleFloat) {
  MOE_REQUIRE_GPU();
  expect_layers_match(Precision::float32, GemmMode::cublas);
}

TEST(RoutedLayer, DropsWhatTheDeviceLayerDoesNotComputeAndNamesIt) {
  MoeConfig c = layer(ScoreFunction::sigmoid);
  c.shared_expert_ffn_hidden = 16;
  c.shared_expert_gate = true;
  c.aux_loss_type = AuxLossType::seq_aux;
  c.aux_loss_coeff = 1e-3;
  c.z_loss_coeff = 1e-4;
  c.bf16_storage = true;
  c.expert_bias = true;
  c.bias_update_rate = 1e-3;
  const RoutedLayer r = routed_layer_of(c);
  EXPECT_EQ(r.left_out, (std::vector<std::string>{"shared expert", "balance loss", "z loss", "bias update",
                                                  "bf16 storage"}));
  EXPECT_FALSE(r.config.has_shared_expert());
  EXPECT_EQ(r.config.aux_loss_type, AuxLossType::none);
  EXPECT_TRUE(r.config.expert_bias) << "the bias is part of the ranking: kept";
  EXPECT_TRUE(routed_layer_of(layer(ScoreFunction::softmax)).left_out.empty());
}

TEST(RoutedLayer, RefusesWhatWouldChangeTheRoutedExperts) {
  MoeConfig capacity = layer(ScoreFunction::softmax);
  capacity.capacity_factor = 1.0;
  EXPECT_THROW(routed_layer_of(capacity), std::invalid_argument);
  MoeConfig hash = layer(ScoreFunction::softmax);
  hash.hash_routing = true;
  EXPECT_THROW(routed_layer_of(hash), std::invalid_argument);
  MoeConfig on_input = layer(ScoreFunction::softmax);
  on_input.topk = 1;
  on_input.apply_probs_on_input = true;
  EXPECT_THROW(routed_layer_of(on_input), std::invalid_argument);
}

}  // namespace
}  // namespace moe::cuda
