// The case format: case.json <-> MoeConfig (strict keys, defaults, the version refusal), the fixed tensor set on
// disk (missing, extra, wrong dtype or shape, stray files), and the comparison rule of `verify`.
#include "golden/case_compare.hpp"
#include "golden/case_json.hpp"
#include "golden/golden_case.hpp"
#include "reference/tests/expect_error.hpp"

#include "golden/tests/case_copy.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>

namespace moe::golden {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kCases = GOLDEN_CASES_DIR;

json minimal_config() {
  return {{"hidden", 8}, {"num_experts", 4}, {"topk", 2}, {"ffn_hidden", 4}, {"score_function", "sigmoid"}};
}

json case_json(const json& config) {
  return {{"format", "moe-golden/1"}, {"description", "t"}, {"config", config},
          {"shape", {{"seq", 4}, {"batch", 2}}}, {"tolerance", {{"rtol", 1e-9}, {"atol", 1e-12}}}};
}

template <typename F>
void expect_error(F&& f, const std::string& fragment) {
  test::expect_error<std::exception>(fragment, f);
}

// A private folder under the temp directory, removed when the test ends.
struct TempDir : test::TempDir {
  explicit TempDir(const std::string& tag) : test::TempDir("case_test", tag) {}
};

// A private copy of a committed case to corrupt.
struct CaseCopy : test::CaseCopy {
  CaseCopy(const std::string& name, const std::string& tag) : test::CaseCopy(kCases / name, "case_test", tag) {}
};

TEST(CaseJson, MinimalConfigTakesTheDefaults) {
  const MoeConfig c = formats::config_from_json(minimal_config());
  EXPECT_EQ(c.normalization, Normalization::megatron);
  EXPECT_EQ(c.drop_policy, DropPolicy::probs);
  EXPECT_EQ(c.topk_scaling_factor, 1.0);
  EXPECT_FALSE(c.shared_expert_clamp);
  EXPECT_FALSE(c.swiglu_clamp.has_value());
  EXPECT_EQ(c.aux_loss_type, AuxLossType::none);
}

TEST(CaseJson, NullMeansDefault) {
  json j = minimal_config();
  j["normalization"] = nullptr;
  j["capacity_factor"] = nullptr;
  j["aux_loss_type"] = nullptr;
  j["expert_bias"] = nullptr;
  const MoeConfig c = formats::config_from_json(j);
  EXPECT_EQ(c.normalization, Normalization::megatron);
  EXPECT_FALSE(c.capacity_factor.has_value());
  EXPECT_FALSE(c.expert_bias);
}

TEST(CaseJson, EveryOptionRoundTrips) {
  json j = minimal_config();
  j.update({{"num_experts", 8}, {"topk", 4}, {"topk_scaling_factor", 2.5}, {"normalization", "deepseek"},
            {"expert_bias", true}, {"num_groups", 4}, {"group_topk", 2}, {"swiglu_clamp", 7.0},
            {"shared_expert_ffn_hidden", 6}, {"shared_expert_gate", true}, {"shared_expert_clamp", true},
            {"latent_size", 4}, {"capacity_factor", 1.25}, {"drop_policy", "position"}, {"pad_to_capacity", true},
            {"aux_loss_type", "seq_aux"}, {"aux_loss_coeff", 0.01}, {"z_loss_coeff", 0.001},
            {"bias_update_rate", 0.001}});
  const MoeConfig c = formats::config_from_json(j);
  const json again = json::parse(formats::config_to_json(c).dump());
  EXPECT_EQ(again, json::parse(formats::config_to_json(formats::config_from_json(again)).dump()));
  for (const auto& [key, value] : j.items()) EXPECT_EQ(again.at(key), value) << key;
  EXPECT_EQ(again.size(), 25u) << "every key of the format is written";
}

TEST(CaseJson, RejectsUnknownConfigKey) {
  json j = minimal_config();
  j["moe_router_topk"] = 2;
  expect_error([&] { formats::config_from_json(j); }, "unknown key 'moe_router_topk'");
}

TEST(CaseJson, RejectsMissingRequiredKey) {
  json j = minimal_config();
  j.erase("ffn_hidden");
  expect_error([&] { formats::config_from_json(j); }, "required key 'ffn_hidden' is missing");
}

TEST(CaseJson, RejectsWrongTypes) {
  json j = minimal_config();
  j["hidden"] = 8.5;
  expect_error([&] { formats::config_from_json(j); }, "'hidden' must be an integer");
  j = minimal_config();
  j["expert_bias"] = 1;
  expect_error([&] { formats::config_from_json(j); }, "'expert_bias' must be true or false");
  j = minimal_config();
  j["aux_loss_type"] = "none";
  expect_error([&] { formats::config_from_json(j); }, "aux, seq_aux, global_aux or null");
}

TEST(CaseJson, RejectsInvalidCombinationNamingTheRule) {
  json j = minimal_config();
  j["score_function"] = "softmax";
  j["expert_bias"] = true;
  expect_error([&] { case_header_from_json(case_json(j), "case.json"); }, "expert_bias requires score_function");
}

TEST(CaseJson, RefusesOtherFormatVersionsNamingThem) {
  json root = case_json(minimal_config());
  root["format"] = "moe-golden/3";
  expect_error([&] { case_header_from_json(root, "case.json"); }, "case format 'moe-golden/3' is not supported");
  expect_error([&] { case_header_from_json(root, "case.json"); }, "reads 'moe-golden/1' and 'moe-golden/2'");
  root.erase("format");
  expect_error([&] { case_header_from_json(root, "case.json"); }, "no 'format'");
}

TEST(CaseJson, RejectsUnknownKeysAtEveryLevel) {
  json root = case_json(minimal_config());
  root["seed"] = 3;
  expect_error([&] { case_header_from_json(root, "case.json"); }, "unknown key 'seed'");
  root = case_json(minimal_config());
  root["shape"]["micro_batch"] = 1;
  expect_error([&] { case_header_from_json(root, "case.json"); }, "shape: unknown key 'micro_batch'");
  root = case_json(minimal_config());
  root["tolerance"]["ulp"] = 4;
  expect_error([&] { case_header_from_json(root, "case.json"); }, "tolerance: unknown key 'ulp'");
}

TEST(GoldenCase, CommittedCaseLoadsWithItsFixedTensorSet) {
  const GoldenCase c = read_case(kCases / "tiny_v4");
  EXPECT_EQ(c.header.config.num_experts, 16);
  EXPECT_EQ(c.header.seq * c.header.batch, 16);
  EXPECT_EQ(c.tensors.size(),
            input_tensor_names(c.header.config).size() + output_tensor_names(c.header.config).size());
  EXPECT_EQ(c.tensors.at("expert_fc1").shape, (std::vector<std::int64_t>{16, 32, 32}));
  EXPECT_TRUE(c.tensors.at("aux_loss").shape.empty());
}

TEST(GoldenCase, TensorSetFollowsTheConfig) {
  MoeConfig c = formats::config_from_json(minimal_config());
  EXPECT_EQ(input_tensor_names(c).size(), 5u);
  EXPECT_EQ(output_tensor_names(c).size(), 8u);
  c.hash_routing = true;
  c.shared_expert_ffn_hidden = 4;
  c.shared_expert_gate = true;
  c.latent_size = 4;
  c.z_loss_coeff = 0.1;
  EXPECT_EQ(input_tensor_names(c).size(), 5u + 2 + 2 + 1 + 2);
  EXPECT_EQ(output_tensor_names(c).size(), 8u + 1 + 2 + 1 + 2);
}

TEST(GoldenCase, MissingTensorIsAnError) {
  const CaseCopy copy("softmax_post", "missing");
  const fs::path& dir = copy.path;
  fs::remove(dir / "grad_expert_fc2.npy");
  expect_error([&] { read_case(dir); }, "missing tensor 'grad_expert_fc2'");
}

TEST(GoldenCase, ExtraTensorIsAnError) {
  const CaseCopy copy("softmax_post", "extra");
  const fs::path& dir = copy.path;
  fs::copy(dir / "y.npy", dir / "expert_bias.npy");
  expect_error([&] { read_case(dir); }, "extra tensor 'expert_bias'");
}

TEST(GoldenCase, StrayFileIsAnError) {
  const CaseCopy copy("softmax_post", "stray");
  const fs::path& dir = copy.path;
  std::ofstream(dir / "notes.txt") << "hello\n";
  expect_error([&] { read_case(dir); }, "unexpected file 'notes.txt'");
}

TEST(GoldenCase, WrongDtypeOrShapeIsAnError) {
  const CaseCopy copy("softmax_post", "dtype");
  const fs::path& dir = copy.path;
  formats::write_npy(dir / "tokens_per_expert.npy", formats::NpyArray::of_reals({8}, std::vector<double>(8, 1.0)));
  expect_error([&] { read_case(dir); }, "tensor 'tokens_per_expert' has dtype <f8, expected <i8");
  const CaseCopy copy2("softmax_post", "shape");
  const fs::path& dir2 = copy2.path;
  formats::write_npy(dir2 / "y.npy", formats::NpyArray::of_reals({3, 8}, std::vector<double>(24, 1.0)));
  expect_error([&] { read_case(dir2); }, "tensor 'y' has shape [3, 8], expected [16, 8]");
}

TEST(GoldenCase, NewerVersionOnDiskIsRefused) {
  const CaseCopy copy("softmax_post", "version");
  const fs::path& dir = copy.path;
  json root = json::parse(std::ifstream(dir / "case.json"));
  root["format"] = "moe-golden/3";
  std::ofstream(dir / "case.json") << root.dump(2);
  expect_error([&] { read_case(dir); }, "case format 'moe-golden/3' is not supported");
}

TEST(GoldenCase, WriteThenReadGivesTheSameCase) {
  const GoldenCase c = read_case(kCases / "latent");
  const TempDir temp("write");
  const fs::path& dir = temp.path;
  write_case(dir, c);
  const GoldenCase back = read_case(dir);
  EXPECT_EQ(json::parse(case_header_to_json(back.header).dump()), json::parse(case_header_to_json(c.header).dump()));
  ASSERT_EQ(back.tensors.size(), c.tensors.size());
  for (const auto& [name, array] : c.tensors) {
    EXPECT_EQ(back.tensors.at(name).as_doubles(), array.as_doubles()) << name;
    EXPECT_EQ(back.tensors.at(name).shape, array.shape) << name;
  }
  GoldenCase incomplete = c;
  incomplete.tensors.erase("grad_latent_up");
  expect_error([&] { write_case(dir, incomplete); }, "missing tensor 'grad_latent_up'");
}

TEST(CaseCompare, AppliesAtolPlusRtolTimesReference) {
  const GoldenCase c = read_case(kCases / "softmax_post");
  std::map<std::string, formats::NpyArray> computed;
  for (const auto& name : output_tensor_names(c.header.config)) computed.emplace(name, c.tensors.at(name));
  for (const auto& t : compare_outputs(c, computed)) {
    EXPECT_TRUE(t.pass()) << t.name;
    EXPECT_EQ(t.max_abs, 0.0) << t.name;
  }
  const double ref = c.tensors.at("y").reals[5];
  const Tolerance& tol = c.header.tolerance;
  computed.at("y").reals[5] = ref + 0.5 * (tol.atol + tol.rtol * std::abs(ref));  // inside the tolerance
  computed.at("grad_x").reals[0] *= 1.0 + 1e-6;                             // outside
  computed.at("routing_map").booleans[0] ^= 1;                              // flipped selection
  for (const auto& t : compare_outputs(c, computed)) {
    const bool should_fail = t.name == "grad_x" || t.name == "routing_map";
    EXPECT_EQ(t.pass(), !should_fail) << t.name;
    if (should_fail) {
      EXPECT_EQ(t.failing, 1) << t.name;
    }
  }
}

}  // namespace
}  // namespace moe::golden
