#include "reference/ep_volume.hpp"
#include "reference/tests/expect_error.hpp"
#include "reference/tests/seed_layout.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

namespace moe {
namespace {

constexpr double MiB = 1024.0 * 1024.0;
constexpr double GiB = 1024.0 * MiB;

using test::seed_layout;

// Seed 000 ("一轮 V4 的数据量"): one microbatch is a packed sequence of 8192 tokens with batch size 1, split by CP2,
// so each rank has n = 8192/2 = 4096 rows (TP1). V4-Pro: h = 7168, E = 384, k = 6, d = 3072.
class SeedVolume : public ::testing::Test {
 protected:
  EpVolume v = ep_volume(layer_preset("v4-pro"), seed_layout(), 8192, 1);
};

TEST_F(SeedVolume, TokensAndRows) {
  EXPECT_EQ(v.rows_per_rank, 4096);
  EXPECT_EQ(v.unique_tokens_per_ep_group, 262144);   // 64 ranks × 4096
  EXPECT_EQ(v.assignments_per_ep_group, 1572864);    // 262,144 × 6
  EXPECT_DOUBLE_EQ(v.expected_rows_per_expert, 4096);  // 1,572,864 / 384
  EXPECT_DOUBLE_EQ(v.expected_rows_per_rank, 24576);   // 6 experts × 4096
  EXPECT_EQ(v.local_experts, 6);
}

// Send buffer 24,576 rows × 7168 × 2 B = 352,321,536 B = 336 MiB; 63/64 of it leaves the rank: 330.75 MiB.
// Dispatch + combine 661.5 MiB; the backward repeats both exchanges: 1323 MiB.
TEST_F(SeedVolume, DispatchPayload) {
  EXPECT_EQ(v.dispatch_bytes, 352321536);
  EXPECT_DOUBLE_EQ(v.remote_dispatch_bytes / MiB, 330.75);
  EXPECT_DOUBLE_EQ(v.forward_bytes / MiB, 661.5);
  EXPECT_DOUBLE_EQ(v.forward_backward_bytes / MiB, 1323.0);
}

// One expert: 3 × 7168 × 3072 = 66,060,288 params; 6 experts in bf16 = 792,723,456 B = 756 MiB per layer.
// The seed places 8 MoE layers on a stage (61 layers over PP8: ceil(61/8) = 8): 6048 MiB = 5.90625 GiB.
TEST_F(SeedVolume, RoutedExpertWeights) {
  EXPECT_EQ(v.params_per_expert, 66060288);
  EXPECT_EQ(v.weight_bytes_per_layer, 792723456);
  EXPECT_EQ(v.moe_layers_per_stage, 8);
  EXPECT_DOUBLE_EQ(static_cast<double>(v.weight_bytes_per_stage) / GiB, 5.90625);
  EXPECT_NEAR(static_cast<double>(v.weight_bytes_per_stage) / GiB, 5.906, 5e-4);
}

// ETP1, EP = p = 64, n = 4096: AllGather gives [p·n, h] = [262144, 7168]; AlltoAll expects [k·n, h] = [24576, 7168].
TEST_F(SeedVolume, AllGatherVersusAlltoAllReceive) {
  EXPECT_EQ(v.allgather_rows, 262144);
  EXPECT_EQ(v.allgather_bytes, 262144LL * 7168 * 2);
  EXPECT_DOUBLE_EQ(v.alltoall_rows, 24576);
  EXPECT_DOUBLE_EQ(v.alltoall_bytes, 24576.0 * 7168 * 2);
}

// Seed 002: 6hd FLOPs per token-expert pair over h (FP8 dispatch) + 2h (BF16 combine) bytes: 2d = 2·3072 = 6144.
TEST_F(SeedVolume, BalancePoint) { EXPECT_DOUBLE_EQ(v.balance_flops_per_byte, 6144); }

TEST_F(SeedVolume, StatesItsAssumptions) {
  std::string all;
  for (const auto& a : v.assumptions) all += a + "\n";
  for (const char* word : {"uniform routing", "dropless", "bf16"}) EXPECT_NE(all.find(word), std::string::npos) << word;
}

// ETP2 × EP2 on 4 ranks, 8 experts, top-2, n = 16: each expert's rows come from all 4 ranks' tokens
// (4·16·2/8 = 16), each rank holds 4 experts and computes on 4·16 = 64 rows, half of each expert's d.
TEST(EpVolume, ExpertTensorParallelDomain) {
  ParallelLayout l;
  l.world = 4;
  l.ep = 2;
  l.etp = 2;
  auto preset = layer_preset("tiny-v4");
  preset.config.num_experts = 8;
  preset.config.topk = 2;
  const auto v = ep_volume(preset, l, 16, 1, 1);
  EXPECT_EQ(v.rows_per_rank, 16);
  EXPECT_EQ(v.unique_tokens_per_ep_group, 32);
  EXPECT_DOUBLE_EQ(v.expected_rows_per_expert, 16);
  EXPECT_DOUBLE_EQ(v.expected_rows_per_rank, 64);
  EXPECT_EQ(v.allgather_rows, 64);
  EXPECT_EQ(v.weight_bytes_per_layer, 4LL * 3 * 32 * 16 / 2 * 2);
  EXPECT_DOUBLE_EQ(v.remote_dispatch_bytes, 16.0 * 2 * 32 * 2 / 2);
}

// V3: 61 blocks, the first 3 dense; PP8's fullest stage has ceil(61/8) = 8 blocks, all MoE. With PP1 the one
// stage holds all 58 MoE layers, not 61.
TEST(EpVolume, StageDepthCountsMoeLayersOnly) {
  ParallelLayout l;
  l.world = 8;
  l.ep = 8;
  EXPECT_EQ(ep_volume(layer_preset("v3"), l, 4096, 1).moe_layers_per_stage, 58);
  l.world = 64;
  l.pp = 8;
  EXPECT_EQ(ep_volume(layer_preset("v3"), l, 4096, 1).moe_layers_per_stage, 8);
}

void expect_rule(const std::string& fragment, auto&& make) { test::expect_error(fragment, make); }

TEST(EpVolume, RejectsShapesThatDoNotDivide) {
  auto l = seed_layout();
  expect_rule("must be divisible by tp·cp (2)", [&] { ep_volume(layer_preset("v4-pro"), l, 4095, 1); });
  ParallelLayout five;
  five.world = 5;
  five.ep = 5;
  expect_rule("num_experts (384) must be divisible by ep (5)", [&] { ep_volume(layer_preset("v4-pro"), five, 4096, 1); });
  five.ep = 1;
  five.etp = 5;
  expect_rule("ffn_hidden (3072) must be divisible by etp (5)", [&] { ep_volume(layer_preset("v4-pro"), five, 4096, 1); });
  ParallelLayout one;
  LayerPreset no_depth = layer_preset("tiny-v4");
  no_depth.num_layers = 0;
  expect_rule("preset tiny-v4 has no model depth", [&] { ep_volume(no_depth, one, 16, 2); });
  EXPECT_NO_THROW(ep_volume(no_depth, one, 16, 2, 2));
}

}  // namespace
}  // namespace moe
