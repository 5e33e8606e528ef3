// compare on a step dump (moe-step/1): megatron-core 0.19.2's whole training step on four CPU ranks, EP 2 (dense
// dp 4, expert dp 2), a GPTModel of two MoE blocks (hidden 8, 4 experts, top-2, aux loss 0.01, vocab 16), 8
// sequences of 8 in microbatches of 1, written by megatron_bridge/step_driver.py from
//   {"model": {"layer": {"hidden": 8, "num_experts": 4, "topk": 2, "ffn_hidden": 4, "score_function": "softmax",
//    "aux_loss_type": "aux", "aux_loss_coeff": 0.01}, "vocab": 16, "num_layers": 2},
//    "layout": {"world": 4, "tp": 1, "ep": 2, "etp": 1}, "seq": 8, "global_batch": 8, "micro_batch": 1, "seed": 5}
// Megatron's reduced gradients match the oracle's global step at float32's tolerance (its CE is float32), not at
// float64's; an expert gradient scale is named as a factor of the experts class; what a rank must hold is checked.
#include "compare/step_dump.hpp"
#include "compare/tests/step_dump_copy.hpp"

#include "formats/npy.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

namespace moe::compare {
namespace {

namespace fs = std::filesystem;

const fs::path kStepDump = fs::path(COMPARE_DATA_DIR) / "megatron_step_ep2_dp4";

class StepDumpCopy : public test::StepDumpCopy {
 protected:
  fs::path source() const override { return kStepDump; }
};

TEST(CompareStep, MegatronsStepMatchesTheGlobalStepAtItsPrecision) {
  const StepComparison c = compare_step_dump(read_step_dump(kStepDump, {"", Precision::float32}));
  EXPECT_TRUE(c.pass());
  // 2 layers × (norm, router, 4 experts × 2) + embedding, final norm, head; each expert on the 2 ranks of its EP
  // rank, every dense parameter on all 4.
  ASSERT_EQ(c.tensors.size(), 23u);
  for (const auto& t : c.tensors) {
    EXPECT_EQ(t.ranks.size(), t.cls == ParameterClass::experts ? 2u : 4u) << t.stem;
    EXPECT_NEAR(t.scale, 1.0, 1e-6) << t.stem;
  }
  EXPECT_TRUE(c.scales.empty());
  // float32's rounding is there (Megatron's CE casts the logits to float32): the files' float64 tolerance fails.
  EXPECT_FALSE(compare_step_dump(read_step_dump(kStepDump)).pass());
}

TEST_F(StepDumpCopy, ExpertGradientsTwiceTheOraclesAreNamedAsAFactor) {
  for (int r = 0; r < 4; ++r)
    for (const auto& e : fs::directory_iterator(dir_ / ("rank" + std::to_string(r))))
      if (e.path().filename().string().find(".expert_fc") != std::string::npos) scale(e.path(), 2.0);
  const StepComparison c = compare_step_dump(read_step_dump(dir_, {"", Precision::float32}));
  ASSERT_FALSE(c.pass());
  ASSERT_EQ(c.scales.size(), 1u);
  EXPECT_EQ(c.scales[0].cls, ParameterClass::experts);
  EXPECT_NEAR(c.scales[0].scale, 2.0, 1e-6);
  EXPECT_EQ(c.scales[0].ranks, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(c.scales[0].tensors, 16);
}

// One rank's copy of the router gradient off: the others agree with the oracle, that copy fails by name.
TEST_F(StepDumpCopy, OneRanksCopyIsComparedToo) {
  scale(dir_ / "rank3" / "grad.layer1.router_weight.npy", 1.001);
  const StepComparison c = compare_step_dump(read_step_dump(dir_, {"", Precision::float32}));
  ASSERT_FALSE(c.pass());
  EXPECT_EQ(c.first_failure()->stem, "layer1.router_weight");
  EXPECT_EQ(c.first_failure()->first_rank, 3);
}

TEST_F(StepDumpCopy, ARankMissingAGradientIsRefused) {
  fs::remove(dir_ / "rank2" / "grad.layer0.expert_fc2.1.npy");
  EXPECT_NE(refusal().find("missing tensor 'grad.layer0.expert_fc2.1'"), std::string::npos);
}

// Rank 0 (EP rank 0) holds experts 0 and 1: expert 2's gradient there is not its to report.
TEST_F(StepDumpCopy, AGradientOfAnExpertTheRankDoesNotHoldIsRefused) {
  fs::copy_file(dir_ / "rank1" / "grad.layer0.expert_fc1.2.npy", dir_ / "rank0" / "grad.layer0.expert_fc1.2.npy");
  EXPECT_NE(refusal().find("extra tensor 'grad.layer0.expert_fc1.2'"), std::string::npos);
}

TEST_F(StepDumpCopy, AMissingRankIsRefused) {
  fs::remove_all(dir_ / "rank3");
  EXPECT_NE(refusal().find("rank3: missing"), std::string::npos);
}

// A folder nothing would read is not left unread: "rank00" beside rank0, or no inputs/ at all.
TEST_F(StepDumpCopy, FoldersOutsideTheFormatAreRefused) {
  fs::create_directory(dir_ / "rank00");
  EXPECT_NE(refusal().find("rank00: not part of a step dump of 4 ranks"), std::string::npos);
  fs::remove(dir_ / "rank00");
  fs::rename(dir_ / "inputs", dir_ / "inputs.old");
  EXPECT_NE(refusal().find("inputs: missing"), std::string::npos);
  fs::copy(dir_ / "inputs.old", dir_ / "inputs");
  EXPECT_NE(refusal().find("inputs.old: not part of a step dump"), std::string::npos);
}

TEST_F(StepDumpCopy, APipelineThatDoesNotSplitTheLayersIsRefused) {
  auto j = meta();
  j["layout"]["world"] = 12;
  j["layout"]["pp"] = 3;  // 2 layers
  write_meta(j);
  EXPECT_NE(refusal().find("layout: pp 3 × vpp 1 does not divide the model's 2 layers"), std::string::npos);
  j["layout"]["world"] = 4;
  j["layout"]["pp"] = 1;
  j["layout"]["vpp"] = 0;
  write_meta(j);
  EXPECT_NE(refusal().find("layout: vpp must be >= 1"), std::string::npos);
}

TEST_F(StepDumpCopy, UnderPipelineParallelismARankHoldsItsStagesParameters) {
  ModelConfig m;
  m.num_layers = 4;
  m.layer.num_experts = 4;
  const ProcessGroups groups(ParallelLayout{.world = 4, .pp = 2, .ep = 2});
  // Ranks 0, 1: stage 0 (layers 0, 1 and the embedding); ranks 2, 3: stage 1 (layers 2, 3, final norm, head).
  EXPECT_TRUE(holds("embedding", groups, 1, m));
  EXPECT_FALSE(holds("embedding", groups, 2, m));
  EXPECT_TRUE(holds("head", groups, 3, m));
  EXPECT_FALSE(holds("final_norm", groups, 0, m));
  EXPECT_TRUE(holds("layer1.router_weight", groups, 0, m));
  EXPECT_FALSE(holds("layer2.router_weight", groups, 0, m));
  // Of the routed experts, the EP rank's: rank 3 is EP rank 1 of stage 1.
  EXPECT_TRUE(holds("layer3.expert_fc1.2", groups, 3, m));
  EXPECT_FALSE(holds("layer3.expert_fc1.1", groups, 3, m));
  EXPECT_FALSE(holds("layer1.expert_fc1.2", groups, 3, m));
  // Two virtual stages: chunks of one layer dealt in turn, layers 0 and 2 on stage 0, 1 and 3 on stage 1.
  EXPECT_TRUE(holds("layer0.router_weight", groups, 0, m, 2));
  EXPECT_TRUE(holds("layer2.router_weight", groups, 0, m, 2));
  EXPECT_FALSE(holds("layer1.router_weight", groups, 0, m, 2));
  EXPECT_TRUE(holds("layer3.router_weight", groups, 2, m, 2));
  EXPECT_TRUE(holds("embedding", groups, 0, m, 2));
  EXPECT_TRUE(holds("head", groups, 2, m, 2));
}

TEST_F(StepDumpCopy, UnknownKeysAndFormatsAreRefused) {
  auto j = meta();
  j["loss_scale"] = 2;
  write_meta(j);
  EXPECT_NE(refusal().find("loss_scale"), std::string::npos);
  j.erase("loss_scale");
  j["format"] = "moe-step/2";
  write_meta(j);
  EXPECT_NE(refusal().find("format 'moe-step/2' is not supported"), std::string::npos);
}

TEST_F(StepDumpCopy, ANonFiniteGradientIsRefused) {
  formats::NpyArray a = formats::read_npy(dir_ / "rank1" / "grad.head.npy");
  a.reals[3] = std::nan("");
  formats::write_npy(dir_ / "rank1" / "grad.head.npy", a);
  EXPECT_NE(refusal().find("non-finite"), std::string::npos);
}

}  // namespace
}  // namespace moe::compare
