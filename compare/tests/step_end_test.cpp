// compare on a step dump with sharded parameters and the step's end: megatron-core 0.19.2's whole training step on
// four CPU ranks, TP 2 with sequence parallelism, EP 2 (two replicas), per-token loss over a padded batch, written by
// megatron_bridge/step_driver.py from
//   {"model": {"layer": {"hidden": 8, "num_experts": 4, "topk": 2, "ffn_hidden": 4, "score_function": "sigmoid",
//    "expert_bias": true, "bias_update_rate": 0.001, "aux_loss_type": "seq_aux", "aux_loss_coeff": 0.01,
//    "z_loss_coeff": 0.001, "shared_expert_ffn_hidden": 4}, "vocab": 16, "num_layers": 2},
//    "layout": {"world": 4, "tp": 2, "ep": 2, "etp": 1}, "seq": 8, "global_batch": 4, "micro_batch": 1, "seed": 13,
//    "per_token_loss": true, "padding": [0, 2]}
// with Megatron's Adam (lr 0.01, betas 0.9 0.95, no weight decay, clipping at 0.5): the TP shards of the embedding,
// head and shared expert, the grad norm every rank reported, every parameter and expert bias after the step, and
// Adam's two moments of every gradient a rank holds.
#include "compare/parameter_shard.hpp"
#include "compare/step_dump.hpp"
#include "compare/tests/step_dump_copy.hpp"

#include "formats/npy.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>

namespace moe::compare {
namespace {

namespace fs = std::filesystem;

const fs::path kTpDump = fs::path(COMPARE_DATA_DIR) / "megatron_step_tp2_ep2";

class TpStepCopy : public test::StepDumpCopy {
 protected:
  fs::path source() const override { return kTpDump; }
};

const StepTensorResult& find(const std::vector<StepTensorResult>& list, const std::string& stem) {
  for (const auto& t : list)
    if (t.stem == stem) return t;
  throw std::runtime_error("no result for " + stem);
}

TEST(ParameterShard, TakesTheRowsColumnsAndGluHalvesMegatronShards) {
  std::vector<double> whole(8 * 2);
  std::iota(whole.begin(), whole.end(), 0.0);  // [8, 2]: row r holds 2r, 2r+1
  // GLU rows, shard 1 of 2: the gate half's rows 2, 3 and the up half's rows 6, 7.
  EXPECT_EQ(take_shard(whole, {8, 2}, {Split::glu_rows, 2, 1}),
            (std::vector<double>{4, 5, 6, 7, 12, 13, 14, 15}));
  EXPECT_EQ(take_shard(whole, {8, 2}, {Split::rows, 4, 3}), (std::vector<double>{12, 13, 14, 15}));
  EXPECT_EQ(take_shard(whole, {8, 2}, {Split::columns, 2, 1}), (std::vector<double>{1, 3, 5, 7, 9, 11, 13, 15}));
  EXPECT_EQ(shard_shape({8, 2}, {Split::glu_rows, 2, 0}), (std::vector<std::int64_t>{4, 2}));
  EXPECT_THROW(shard_shape({6, 2}, {Split::glu_rows, 2, 0}), std::invalid_argument);  // halves of 3 rows
}

TEST(CompareStepEnd, MegatronsShardedStepAndItsEndMatchTheOracle) {
  const StepComparison c = compare_step_dump(read_step_dump(kTpDump, {"", Precision::float32}));
  EXPECT_TRUE(c.pass());
  // embedding, final norm, head + 2 layers × (norm, router, 4 experts × 2, shared fc1 and fc2).
  ASSERT_EQ(c.tensors.size(), 27u);
  EXPECT_EQ(find(c.tensors, "embedding").elements, 8 * 8);  // vocab 16 over tp 2
  EXPECT_EQ(find(c.tensors, "layer0.shared_fc1").elements, 4 * 8);  // [2·4, 8] over tp 2
  EXPECT_EQ(find(c.tensors, "layer1.expert_fc1.3").ranks, (std::vector<int>{1, 3}));
  ASSERT_TRUE(c.grad_norm.has_value());
  EXPECT_EQ(c.grad_norm->got.size(), 4u);
  ASSERT_TRUE(c.lm_loss.has_value());  // the CE per valid token Megatron's training loop logs
  EXPECT_TRUE(c.lm_loss->pass());
  // Every trained parameter and both layers' expert bias after the step, on every rank that holds it.
  ASSERT_EQ(c.after.size(), 29u);
  EXPECT_EQ(find(c.after, "layer0.expert_bias").ranks.size(), 4u);
}

TEST_F(TpStepCopy, AGradNormOffOnOneRankFailsNamingIt) {
  auto j = meta();
  j["reported"]["grad_norm"][2] = j["reported"]["grad_norm"][2].get<double>() * 0.99;
  write_meta(j);
  const StepComparison c = judged();
  EXPECT_FALSE(c.pass());
  ASSERT_TRUE(c.grad_norm.has_value());
  EXPECT_EQ(c.grad_norm->worst_rank, 2);
  for (const auto& t : c.tensors) EXPECT_TRUE(t.pass()) << t.stem;
}

TEST_F(TpStepCopy, AGradNormNearTheDoubleRangeIsJudgedToANumber) {
  auto j = meta();
  j["reported"]["grad_norm"][0] = 1.7e308;  // over an allowance below 1: the ratio overflows unless held finite
  write_meta(j);
  const StepComparison c = judged();
  ASSERT_TRUE(c.grad_norm.has_value());
  EXPECT_FALSE(c.grad_norm->pass());
  EXPECT_EQ(c.grad_norm->worst_rank, 0);
  EXPECT_TRUE(std::isfinite(c.grad_norm->worst));
}

TEST_F(TpStepCopy, ALossOnePerMilleOffFailsAndNothingElse) {
  auto j = meta();
  j["reported"]["lm_loss"] = j["reported"]["lm_loss"].get<double>() * 1.001;
  write_meta(j);
  const StepComparison c = judged();
  EXPECT_FALSE(c.pass());
  ASSERT_TRUE(c.lm_loss.has_value());
  EXPECT_FALSE(c.lm_loss->pass());
  EXPECT_TRUE(c.grad_norm->pass());
  EXPECT_EQ(c.first_failure(), nullptr);  // every tensor passes
  j["reported"]["lm_loss"] = -1;
  write_meta(j);
  EXPECT_NE(refusal().find("reported.lm_loss: -1 is not a loss"), std::string::npos);
}

TEST_F(TpStepCopy, AParameterMovedByTheLearningRateFails) {
  add(dir_ / "rank3" / "param.head.npy", 5, 0.01);
  const StepComparison c = judged();
  EXPECT_FALSE(c.pass());
  const StepTensorResult& head = find(c.after, "head");
  EXPECT_FALSE(head.pass());
  EXPECT_EQ(head.first_rank, 3);
  EXPECT_EQ(head.first_index, 5);
}

TEST_F(TpStepCopy, AnExpertBiasUpdatedTheWrongWayFails) {
  add(dir_ / "rank0" / "param.layer1.expert_bias.npy", 1, 0.002);  // the update's sign flipped: 2·rate
  const StepComparison c = judged();
  EXPECT_FALSE(c.pass());
  EXPECT_FALSE(find(c.after, "layer1.expert_bias").pass());
}

TEST_F(TpStepCopy, WeightDecayIsJudgedPerClassAsNoDecaySays) {
  // The committed step ran without weight decay: claiming 0.1 fails every parameter that decays, and only those.
  auto j = meta();
  j["optimizer"]["weight_decay"] = 0.1;
  j["optimizer"]["no_decay"] = {"norms"};
  write_meta(j);
  const StepComparison c = judged();
  EXPECT_FALSE(c.pass());
  EXPECT_TRUE(find(c.after, "final_norm").pass());
  EXPECT_TRUE(find(c.after, "layer0.block_norm").pass());
  EXPECT_FALSE(find(c.after, "head").pass());
  EXPECT_FALSE(find(c.after, "layer0.router_weight").pass());
  // Every class exempt: the same step passes.
  j["optimizer"]["no_decay"] = {"embedding", "norms", "router", "experts", "shared expert", "output layer"};
  write_meta(j);
  EXPECT_TRUE(judged().pass());
  j["optimizer"]["no_decay"] = {"biases"};
  write_meta(j);
  EXPECT_NE(refusal().find("optimizer.no_decay: \"biases\" is not a parameter class"), std::string::npos);
}

TEST_F(TpStepCopy, AdamsMomentsArePerRankAndOnePercentOffFails) {
  const StepComparison ok = judged();
  EXPECT_EQ(ok.state.size(), 2 * ok.tensors.size());  // exp_avg and exp_avg_sq of every gradient
  EXPECT_EQ(find(ok.state, "exp_avg_sq.head").ranks.size(), 4u);
  scale(dir_ / "rank1" / "state.exp_avg_sq.head.npy", 1.01);  // β2 0.95 taken as 0.9495
  const StepComparison c = judged();
  EXPECT_FALSE(c.pass());
  const StepTensorResult& v = find(c.state, "exp_avg_sq.head");
  EXPECT_FALSE(v.pass());
  EXPECT_EQ(v.first_rank, 1);
  EXPECT_TRUE(find(c.state, "exp_avg.head").pass());
  EXPECT_TRUE(std::all_of(c.tensors.begin(), c.tensors.end(), [](const auto& t) { return t.pass(); }));
}

TEST_F(TpStepCopy, AMissingMomentOrMomentsNotDeclaredAreRefused) {
  fs::remove(dir_ / "rank2" / "state.exp_avg.layer0.router_weight.npy");
  EXPECT_NE(refusal().find("missing tensor 'state.exp_avg.layer0.router_weight'"), std::string::npos);
  fs::copy_file(kTpDump / "rank2" / "state.exp_avg.layer0.router_weight.npy",
                dir_ / "rank2" / "state.exp_avg.layer0.router_weight.npy");
  auto j = meta();
  j["optimizer"]["state"] = false;
  write_meta(j);
  EXPECT_NE(refusal().find("extra tensor 'state."), std::string::npos);
}

TEST_F(TpStepCopy, ALaterStepNeedsTheMomentsItStartedFromAndTheirBiasCorrection) {
  auto j = meta();
  j["optimizer"]["steps_before"] = 1;
  write_meta(j);
  EXPECT_NE(refusal().find("missing tensor 'exp_avg."), std::string::npos);
  // Zero moments as a second step's: its bias corrections (1 − β²) move every element ~0.74× as far as the first
  // step's did, so the parameters after the step fail, and the moments (the same either way) pass.
  for (const auto& entry : fs::directory_iterator(dir_ / "inputs")) {
    const std::string stem = entry.path().stem().string();
    bool trained = false;  // the batch and the expert bias have no moments
    for (int r = 0; r < 4; ++r)
      trained = trained || fs::exists(dir_ / ("rank" + std::to_string(r)) / ("grad." + stem + ".npy"));
    if (!trained) continue;
    formats::NpyArray zero = formats::read_npy(entry.path());
    std::fill(zero.reals.begin(), zero.reals.end(), 0.0);
    formats::write_npy(dir_ / "inputs" / ("exp_avg." + stem + ".npy"), zero);
    formats::write_npy(dir_ / "inputs" / ("exp_avg_sq." + stem + ".npy"), zero);
  }
  const StepComparison c = judged();
  EXPECT_FALSE(c.pass());
  EXPECT_FALSE(find(c.after, "head").pass());
  EXPECT_TRUE(std::all_of(c.state.begin(), c.state.end(), [](const auto& t) { return t.pass(); }));
  // The moments where the step is a first one: refused.
  j["optimizer"]["steps_before"] = 0;
  write_meta(j);
  EXPECT_NE(refusal().find("extra tensor 'exp_avg"), std::string::npos);
}

TEST_F(TpStepCopy, AWholeParameterWhereTheRankHoldsAShardIsRefused) {
  formats::NpyArray whole = formats::read_npy(dir_ / "inputs" / "embedding.npy");
  formats::write_npy(dir_ / "rank1" / "grad.embedding.npy", whole);
  EXPECT_NE(refusal().find("grad.embedding"), std::string::npos);
}

TEST_F(TpStepCopy, AMissingParameterAfterTheStepIsRefused) {
  fs::remove(dir_ / "rank2" / "param.layer0.router_weight.npy");
  EXPECT_NE(refusal().find("missing tensor 'param.layer0.router_weight'"), std::string::npos);
}

TEST_F(TpStepCopy, ParametersAfterTheStepWithoutAnOptimizerAreRefused) {
  auto j = meta();
  j.erase("optimizer");
  write_meta(j);
  EXPECT_NE(refusal().find("extra tensor 'param."), std::string::npos);
}

TEST_F(TpStepCopy, ABadOptimizerOrNormListIsRefused) {
  auto j = meta();
  j["optimizer"]["kind"] = "sgd";
  write_meta(j);
  EXPECT_NE(refusal().find("optimizer.kind 'sgd'"), std::string::npos);
  j["optimizer"]["kind"] = "adam";
  j["reported"]["grad_norm"].erase(3);
  write_meta(j);
  EXPECT_NE(refusal().find("one norm per rank (4)"), std::string::npos);
}

}  // namespace
}  // namespace moe::compare
