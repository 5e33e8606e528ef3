// read_model_file (model_files/model_file.hpp): each shipped model file (models/) maps onto the MoeConfig and depth
// derived here by hand from the file's numbers, field by field; our format round-trips; golden cases read; every
// refusal is one line naming the file and the key; no key of a Hugging Face file is dropped silently.
#include "model_files/model_file.hpp"

#include "golden/case_json.hpp"
#include "reference/presets.hpp"
#include "reference/tests/expect_error.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <sys/stat.h>

namespace moe::model_files {
namespace {

namespace fs = std::filesystem;
using moe::test::expect_error;
using nlohmann::json;

const fs::path kModels = MODELS_DIR;
const fs::path kCases = GOLDEN_CASES_DIR;

// Every field of MoeConfig, so that a field the mapping sets wrongly — or forgets — fails by name.
void expect_same_config(const MoeConfig& got, const MoeConfig& want) {
  EXPECT_EQ(got.hidden, want.hidden);
  EXPECT_EQ(got.num_experts, want.num_experts);
  EXPECT_EQ(got.topk, want.topk);
  EXPECT_EQ(got.ffn_hidden, want.ffn_hidden);
  EXPECT_EQ(got.score_function, want.score_function);
  EXPECT_EQ(got.pre_softmax, want.pre_softmax);
  EXPECT_EQ(got.topk_scaling_factor, want.topk_scaling_factor);
  EXPECT_EQ(got.normalization, want.normalization);
  EXPECT_EQ(got.expert_bias, want.expert_bias);
  EXPECT_EQ(got.num_groups, want.num_groups);
  EXPECT_EQ(got.group_topk, want.group_topk);
  EXPECT_EQ(got.hash_routing, want.hash_routing);
  EXPECT_EQ(got.swiglu_clamp, want.swiglu_clamp);
  EXPECT_EQ(got.shared_expert_ffn_hidden, want.shared_expert_ffn_hidden);
  EXPECT_EQ(got.shared_expert_gate, want.shared_expert_gate);
  EXPECT_EQ(got.shared_expert_clamp, want.shared_expert_clamp);
  EXPECT_EQ(got.latent_size, want.latent_size);
  EXPECT_EQ(got.apply_probs_on_input, want.apply_probs_on_input);
  EXPECT_EQ(got.capacity_factor, want.capacity_factor);
  EXPECT_EQ(got.drop_policy, want.drop_policy);
  EXPECT_EQ(got.pad_to_capacity, want.pad_to_capacity);
  EXPECT_EQ(got.aux_loss_type, want.aux_loss_type);
  EXPECT_EQ(got.aux_loss_coeff, want.aux_loss_coeff);
  EXPECT_EQ(got.z_loss_coeff, want.z_loss_coeff);
  EXPECT_EQ(got.bias_update_rate, want.bias_update_rate);
  EXPECT_EQ(got.semantics.spec(), want.semantics.spec());
}

struct Depth {
  int num_layers = 0;
  int num_dense_layers = 0;
  int n_hash_layers = 0;
  int vocab = 0;
  int seq = 0;
  int batch = 0;
};

void expect_depth(const LayerPreset& got, const Depth& want) {
  EXPECT_EQ(got.num_layers, want.num_layers);
  EXPECT_EQ(got.num_dense_layers, want.num_dense_layers);
  EXPECT_EQ(got.n_hash_layers, want.n_hash_layers);
  EXPECT_EQ(got.vocab, want.vocab);
  EXPECT_EQ(got.seq, want.seq);
  EXPECT_EQ(got.batch, want.batch);
}

bool has_entry(const std::vector<std::string>& lines, const std::string& fragment) {
  return std::any_of(lines.begin(), lines.end(),
                     [&](const std::string& l) { return l.find(fragment) != std::string::npos; });
}

std::vector<std::string> unknown_entries(const ModelFile& m) {
  std::vector<std::string> out;
  for (const auto& l : m.ignored)
    if (l.rfind("unknown:", 0) == 0) out.push_back(l);
  return out;
}

json load(const fs::path& path) {
  std::ifstream in(path);
  return json::parse(in);
}

// A fresh folder per test, for variants of the shipped files.
fs::path scratch() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const fs::path dir = fs::path(::testing::TempDir()) / "model_file_tests" / info->name();
  fs::create_directories(dir);
  return dir;
}

fs::path write_json(const std::string& file, const json& j) {
  const fs::path path = scratch() / file;
  std::ofstream(path) << j.dump(2);
  return path;
}

fs::path variant(const std::string& shipped, const std::string& key, const json& value) {
  json j = load(kModels / shipped);
  if (value.is_discarded()) {
    j.erase(key);
  } else {
    j[key] = value;
  }
  return write_json(shipped, j);
}

// A refusal: std::invalid_argument, one line, naming the file and containing `fragment` (the key).
void expect_refused(const fs::path& path, const std::string& fragment) {
  const std::string what = expect_error(fragment, [&] { read_model_file(path); });
  EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  EXPECT_NE(what.find(path.string()), std::string::npos) << what;
}

// --- the shipped Hugging Face files ---------------------------------------------------------------------------

TEST(ModelFile, Qwen3_30B_A3B) {
  const ModelFile m = read_model_file(kModels / "qwen3-30b-a3b.json");
  EXPECT_EQ(m.source, "Hugging Face config.json (qwen3_moe)");
  EXPECT_EQ(m.model.name, "qwen3-30b-a3b");
  MoeConfig want;
  want.hidden = 2048;        // hidden_size
  want.num_experts = 128;    // num_experts
  want.topk = 8;             // num_experts_per_tok
  want.ffn_hidden = 768;     // moe_intermediate_size
  want.pre_softmax = false;  // norm_topk_prob true: renormalised top-k = softmax over the chosen logits
  want.aux_loss_type = AuxLossType::aux;
  want.aux_loss_coeff = 0.001;  // router_aux_loss_coef
  expect_same_config(m.model.config, want);
  expect_depth(m.model, {48, 0, 0, 151936, 4096, 1});  // num_hidden_layers, vocab_size, default run shape
  EXPECT_TRUE(unknown_entries(m).empty()) << unknown_entries(m).front();
  EXPECT_TRUE(has_entry(m.ignored, "max_position_embeddings = 40960"));
  EXPECT_TRUE(has_entry(m.ignored, "intermediate_size = 6144: the dense FFN"));
  EXPECT_TRUE(has_entry(m.assumptions, "load_balancing_loss_func"));
  EXPECT_TRUE(has_entry(m.assumptions, "seq 4096, micro-batch 1"));
}

TEST(ModelFile, DeepSeekV3) {
  const ModelFile m = read_model_file(kModels / "deepseek-v3.json");
  EXPECT_EQ(m.source, "Hugging Face config.json (deepseek_v3)");
  MoeConfig want;
  want.hidden = 7168;
  want.num_experts = 256;  // n_routed_experts
  want.topk = 8;
  want.ffn_hidden = 2048;
  want.score_function = ScoreFunction::sigmoid;
  want.topk_scaling_factor = 2.5;                // routed_scaling_factor
  want.normalization = Normalization::megatron;  // norm_topk_prob true: Σ + 1e-20 when k > 1
  want.expert_bias = true;                       // topk_method noaux_tc
  want.bias_update_rate = 1e-3;                  // assumed
  want.num_groups = 8;                           // n_group
  want.group_topk = 4;                           // topk_group (8 / 4 = 2 per group, DeepSeek's top-2)
  want.shared_expert_ffn_hidden = 1 * 2048;      // n_shared_experts · moe_intermediate_size
  want.aux_loss_type = AuxLossType::seq_aux;     // seq_aux true
  want.aux_loss_coeff = 0.001;                   // aux_loss_alpha
  expect_same_config(m.model.config, want);
  expect_depth(m.model, {61 - 3, 3, 0, 129280, 4096, 1});  // first_k_dense_replace 3
  EXPECT_TRUE(unknown_entries(m).empty()) << unknown_entries(m).front();
  for (const char* key : {"num_nextn_predict_layers = 1", "ep_size = 1", "kv_lora_rank = 512", "quantization_config"})
    EXPECT_TRUE(has_entry(m.ignored, key)) << key;
  EXPECT_TRUE(has_entry(m.assumptions, "bias_update_rate 0.001"));
  EXPECT_TRUE(has_entry(m.assumptions, "actual selection"));
}

// DeepSeek-V4-Flash (models/deepseek-v4-flash.json): every MoE key from the issue's list of the public file.
TEST(ModelFile, DeepSeekV4Flash) {
  const ModelFile m = read_model_file(kModels / "deepseek-v4-flash.json");
  EXPECT_EQ(m.source, "Hugging Face config.json (deepseek_v4)");
  MoeConfig want;
  want.hidden = 4096;
  want.num_experts = 256;  // n_routed_experts
  want.topk = 6;
  want.ffn_hidden = 2048;
  want.score_function = ScoreFunction::sqrtsoftplus;
  want.topk_scaling_factor = 1.5;                // routed_scaling_factor
  want.normalization = Normalization::megatron;  // norm_topk_prob: s_I / Σ s_I
  want.expert_bias = true;                       // noaux_tc
  want.bias_update_rate = 1e-3;                  // assumed (the paper's)
  want.swiglu_clamp = 10.0;                      // swiglu_limit, the routed experts only
  want.shared_expert_ffn_hidden = 1 * 2048;      // n_shared_experts · moe_intermediate_size
  expect_same_config(m.model.config, want);
  EXPECT_FALSE(m.model.config.shared_clamp().has_value()) << "DeepSeek's shared expert has no clamp";
  expect_depth(m.model, {43, 0, 3, 129280, 4096, 1});  // num_hidden_layers, num_hash_layers
  EXPECT_TRUE(unknown_entries(m).empty()) << unknown_entries(m).front();
  for (const char* key : {"hc_mult = 4", "expert_dtype = \"fp4\"", "index_topk", "o_groups", "quantization_config"})
    EXPECT_TRUE(has_entry(m.ignored, key)) << key;
  EXPECT_TRUE(has_entry(m.assumptions, "transformers 5.25 clamps the shared expert too"));
  EXPECT_TRUE(has_entry(m.assumptions, "no balance loss"));
}

// Experts with biases are refused in every family (only V4's mapping looked at mlp_bias before: a Qwen3 or V3
// file with it true was read as if unbiased, the key merely listed as unknown); transformers' own attention keys
// that its to_dict() writes are named, not unknown.
TEST(ModelFile, ExpertBiasesAreRefusedInEveryFamily) {
  for (const char* shipped : {"qwen3-30b-a3b.json", "deepseek-v3.json", "mixtral-8x7b.json"})
    expect_refused(variant(shipped, "mlp_bias", true), "'mlp_bias' is true");
  for (const char* key : {"qk_head_dim", "qkv_bias", "rope_interleave"}) {
    const ModelFile m = read_model_file(variant("deepseek-v3.json", key, 1));
    EXPECT_TRUE(unknown_entries(m).empty()) << key << ": " << unknown_entries(m).front();
  }
  EXPECT_TRUE(unknown_entries(read_model_file(variant("deepseek-v3.json", "mlp_bias", false))).empty());
}

TEST(ModelFile, DeepSeekV4RefusesWhatItDoesNotModel) {
  expect_refused(variant("deepseek-v4-flash.json", "scoring_func", "softmax"), "'scoring_func' is \"softmax\"");
  expect_refused(variant("deepseek-v4-flash.json", "topk_method", "greedy"), "'topk_method' is \"greedy\"");
  expect_refused(variant("deepseek-v4-flash.json", "mlp_bias", true), "'mlp_bias' is true");
  json types = json::array();
  for (int l = 0; l < 43; ++l) types.push_back(l == 5 ? "hash_moe" : "moe");
  expect_refused(variant("deepseek-v4-flash.json", "mlp_layer_types", types), "a hash layer after a routed one");
  expect_refused(variant("deepseek-v4-flash.json", "num_hash_layers", 44), "'num_hash_layers' is 44");
  // mlp_layer_types, when given, says which layers are hash layers.
  types = json::array();
  for (int l = 0; l < 43; ++l) types.push_back(l < 2 ? "hash_moe" : "moe");
  EXPECT_EQ(read_model_file(variant("deepseek-v4-flash.json", "mlp_layer_types", types)).model.n_hash_layers, 2);
}

// swiglu_limit 0 is a clamp at 0, as transformers 5.25 applies it (no "if limit" in DeepseekV4Experts): it was read
// as "no clamp", and a block captured with it failed against the oracle.
TEST(ModelFile, DeepSeekV4SwigluLimitZeroClampsAtZero) {
  const ModelFile m = read_model_file(variant("deepseek-v4-flash.json", "swiglu_limit", 0));
  ASSERT_TRUE(m.model.config.swiglu_clamp.has_value()) << "swiglu_limit 0 read as no clamp";
  EXPECT_EQ(*m.model.config.swiglu_clamp, 0.0);
  EXPECT_EQ(m.model.config.routed_clamp(), std::optional<double>(0.0));
  EXPECT_FALSE(m.model.config.shared_clamp().has_value());
  EXPECT_TRUE(has_entry(m.assumptions, "swiglu_limit 0 -> a clamp at 0"));
  m.model.config.validate();
  expect_refused(variant("deepseek-v4-flash.json", "swiglu_limit", -1), "'swiglu_limit' must be >= 0");
}

TEST(ModelFile, Mixtral8x7B) {
  const ModelFile m = read_model_file(kModels / "mixtral-8x7b.json");
  EXPECT_EQ(m.source, "Hugging Face config.json (mixtral)");
  MoeConfig want;
  want.hidden = 4096;
  want.num_experts = 8;      // num_local_experts
  want.topk = 2;             // num_experts_per_tok
  want.ffn_hidden = 14336;   // intermediate_size is the expert width here
  want.pre_softmax = false;  // always renormalised over the top-k
  want.aux_loss_type = AuxLossType::aux;
  want.aux_loss_coeff = 0.02;  // router_aux_loss_coef
  expect_same_config(m.model.config, want);
  expect_depth(m.model, {32, 0, 0, 32000, 4096, 1});
  EXPECT_TRUE(unknown_entries(m).empty()) << unknown_entries(m).front();
  EXPECT_TRUE(has_entry(m.assumptions, "router_jitter_noise absent"));
  EXPECT_TRUE(has_entry(m.assumptions, "32/2 times HF's"));
}

// --- the other mapped types, from their MoE keys --------------------------------------------------------------

// Qwen1.5-MoE-A2.7B's MoE keys: a gated shared expert and no renormalisation.
json qwen2_moe() {
  return {{"model_type", "qwen2_moe"},
          {"hidden_size", 2048},
          {"num_experts", 60},
          {"num_experts_per_tok", 4},
          {"moe_intermediate_size", 1408},
          {"shared_expert_intermediate_size", 5632},
          {"norm_topk_prob", false},
          {"num_hidden_layers", 24},
          {"vocab_size", 151936},
          {"decoder_sparse_step", 1},
          {"mlp_only_layers", json::array()},
          {"router_aux_loss_coef", 0.001},
          {"hidden_act", "silu"}};
}

TEST(ModelFile, Qwen2MoeGatedSharedExpert) {
  const ModelFile m = read_model_file(write_json("config.json", qwen2_moe()));
  MoeConfig want;
  want.hidden = 2048;
  want.num_experts = 60;
  want.topk = 4;
  want.ffn_hidden = 1408;
  want.pre_softmax = true;  // norm_topk_prob false: the full softmax's values
  want.shared_expert_ffn_hidden = 5632;
  want.shared_expert_gate = true;  // sigmoid(Linear(h, 1)) of Qwen2-MoE
  want.aux_loss_type = AuxLossType::aux;
  want.aux_loss_coeff = 0.001;
  expect_same_config(m.model.config, want);
  expect_depth(m.model, {24, 0, 0, 151936, 4096, 1});
  EXPECT_EQ(m.model.name, "Qwen2MoeGatedSharedExpert") << "config.json takes its folder's name";
}

// DeepSeek-V2-Lite's MoE keys: softmax, greedy, not renormalised, two shared experts, one dense block.
json deepseek_v2_lite() {
  return {{"model_type", "deepseek_v2"},
          {"hidden_size", 2048},
          {"n_routed_experts", 64},
          {"num_experts_per_tok", 6},
          {"moe_intermediate_size", 1408},
          {"n_shared_experts", 2},
          {"scoring_func", "softmax"},
          {"topk_method", "greedy"},
          {"norm_topk_prob", false},
          {"routed_scaling_factor", 1.0},
          {"n_group", 1},
          {"topk_group", 1},
          {"first_k_dense_replace", 1},
          {"moe_layer_freq", 1},
          {"num_hidden_layers", 27},
          {"aux_loss_alpha", 0.001},
          {"seq_aux", true},
          {"vocab_size", 102400},
          {"hidden_act", "silu"}};
}

TEST(ModelFile, DeepSeekV2Lite) {
  const ModelFile m = read_model_file(write_json("deepseek-v2-lite.json", deepseek_v2_lite()));
  MoeConfig want;
  want.hidden = 2048;
  want.num_experts = 64;
  want.topk = 6;
  want.ffn_hidden = 1408;
  want.pre_softmax = true;                   // softmax, norm_topk_prob false
  want.shared_expert_ffn_hidden = 2 * 1408;  // n_shared_experts 2
  want.aux_loss_type = AuxLossType::seq_aux;
  want.aux_loss_coeff = 0.001;
  expect_same_config(m.model.config, want);
  expect_depth(m.model, {26, 1, 0, 102400, 4096, 1});
  EXPECT_TRUE(has_entry(m.ignored, "n_group = 1: topk_method \"greedy\""));
}

// V2's gate does not scale the weights it renormalises; V3's does.
// An absent key takes transformers 5.25's default for the model type, and the assumption names that class (it took
// "no shared expert", scale 1, no dense blocks and one group before, which are neither transformers' nor the file's).
TEST(ModelFile, DeepSeekDefaultsAreTransformersClassDefaults) {
  json j = load(kModels / "deepseek-v3.json");
  for (const char* key : {"routed_scaling_factor", "n_shared_experts", "first_k_dense_replace", "n_group", "topk_group"})
    j.erase(key);
  const ModelFile v3 = read_model_file(write_json("deepseek-v3.json", j));
  EXPECT_EQ(v3.model.config.topk_scaling_factor, 2.5);
  EXPECT_EQ(v3.model.config.shared_expert_ffn_hidden, 2048);
  EXPECT_EQ(v3.model.num_dense_layers, 3);
  EXPECT_EQ(v3.model.config.num_groups, 8);
  EXPECT_EQ(v3.model.config.group_topk, 4);
  EXPECT_TRUE(has_entry(v3.assumptions, "n_shared_experts absent: taken as 1 (transformers 5.25's DeepseekV3Config"));
  j = deepseek_v2_lite();
  j.erase("n_shared_experts");
  const ModelFile v2 = read_model_file(write_json("deepseek-v2.json", j));
  EXPECT_EQ(v2.model.config.shared_expert_ffn_hidden, 2 * 1408);
  EXPECT_TRUE(has_entry(v2.assumptions, "transformers 5.25's DeepseekV2Config default"));
}

TEST(ModelFile, DeepSeekV2ScalesOnlyUnnormalisedWeights) {
  json j = deepseek_v2_lite();
  j["norm_topk_prob"] = true;
  j["routed_scaling_factor"] = 16.0;
  const ModelFile v2 = read_model_file(write_json("v2.json", j));
  EXPECT_FALSE(v2.model.config.pre_softmax);
  EXPECT_EQ(v2.model.config.topk_scaling_factor, 1.0);
  EXPECT_TRUE(has_entry(v2.assumptions, "routed_scaling_factor 16.0 not applied"));
  j["model_type"] = "deepseek_v3";
  EXPECT_EQ(read_model_file(write_json("v3.json", j)).model.config.topk_scaling_factor, 16.0);
}

// Under v2-gate-softmax-scaled (profile hf-transformers-5.25) V2 is mapped as transformers computes it: softmax
// whatever scoring_func says, the top k not renormalised, always scaled; V3 and the intended mapping are untouched.
TEST(ModelFile, TransformersV2GateIsAMappedDeviation) {
  json j = deepseek_v2_lite();
  j["norm_topk_prob"] = true;
  j["scoring_func"] = "sigmoid";
  j["routed_scaling_factor"] = 16.0;
  const Semantics hf = Semantics::profile("hf-transformers-5.25");
  const ModelFile v2 = read_model_file(write_json("v2.json", j), hf);
  EXPECT_EQ(v2.model.config.score_function, ScoreFunction::softmax);
  EXPECT_TRUE(v2.model.config.pre_softmax);
  EXPECT_EQ(v2.model.config.topk_scaling_factor, 16.0);
  EXPECT_TRUE(has_entry(v2.assumptions, "v2-gate-softmax-scaled (the semantics)"));
  const ModelFile intended = read_model_file(write_json("v2.json", j));
  EXPECT_EQ(intended.model.config.score_function, ScoreFunction::sigmoid);
  EXPECT_EQ(intended.model.config.topk_scaling_factor, 1.0);
  const ModelFile off = read_model_file(write_json("v2.json", j), hf.with(Deviation::v2_gate_softmax_scaled, false));
  EXPECT_EQ(off.model.config.score_function, ScoreFunction::sigmoid);
  j["model_type"] = "deepseek_v3";
  j["topk_method"] = "noaux_tc";
  const ModelFile v3 = read_model_file(write_json("v3.json", j), hf);
  EXPECT_EQ(v3.model.config.score_function, ScoreFunction::sigmoid);
}

// Sigmoid with k = 1 and no renormalisation: the weight is the score, which Megatron's normalisation leaves alone.
TEST(ModelFile, DeepSeekSigmoidTop1WithoutRenormalisation) {
  json j = load(kModels / "deepseek-v3.json");
  j["num_experts_per_tok"] = 1;
  j["n_group"] = 1;
  j["norm_topk_prob"] = false;
  const ModelFile m = read_model_file(write_json("deepseek-v3.json", j));
  EXPECT_EQ(m.model.config.topk, 1);
  EXPECT_EQ(m.model.config.num_groups, 0);
  EXPECT_EQ(m.model.config.normalization, Normalization::megatron);
  EXPECT_TRUE(has_entry(m.assumptions, "n_group 1: one group"));
}

// --- ours -----------------------------------------------------------------------------------------------------

TEST(ModelFile, TinyV4IsThePreset) {
  const ModelFile m = read_model_file(kModels / "tiny-v4.moe-model.json");
  const LayerPreset& preset = layer_preset("tiny-v4");
  EXPECT_EQ(m.source, "moe-model/1");
  EXPECT_EQ(m.model.name, "tiny-v4");
  expect_same_config(m.model.config, preset.config);
  expect_depth(m.model, {4, 0, 1, preset.vocab, preset.seq, preset.batch});
  EXPECT_TRUE(m.assumptions.empty());
  EXPECT_TRUE(m.ignored.empty());
}

TEST(ModelFile, OursRoundTrips) {
  // A model using what tiny-v4 does not: dense layers, another semantics, capacity, global_aux, z-loss, clamp.
  LayerPreset p = layer_preset("tiny-capacity");
  p.config.semantics = Semantics::parse("megatron-core-0.19,+fused-swiglu-ignores-clamp");
  p.num_layers = 3;
  p.num_dense_layers = 2;
  p.n_hash_layers = 0;
  const fs::path path = scratch() / "capacity.json";
  write_model_file(path, p);
  const ModelFile back = read_model_file(path);
  expect_same_config(back.model.config, p.config);
  expect_depth(back.model, {3, 2, 0, p.vocab, p.seq, p.batch});
  EXPECT_EQ(back.model.name, p.name);
  EXPECT_EQ(back.model.description, p.description);
  EXPECT_EQ(json(model_file_json(back.model)), load(path));

  // The shipped file is what the writer writes for it.
  const fs::path shipped = kModels / "tiny-v4.moe-model.json";
  EXPECT_EQ(json(model_file_json(read_model_file(shipped).model)), load(shipped));
}

TEST(ModelFile, AttentionRoundTripsAndComesFromGoldenModelCases) {
  LayerPreset p = layer_preset("tiny-attention");
  const fs::path path = scratch() / "attention.json";
  write_model_file(path, p);
  const ModelFile back = read_model_file(path);
  EXPECT_EQ(back.model.attention.heads, 4);
  EXPECT_EQ(back.model.attention.groups, 2);
  EXPECT_EQ(back.model.attention.head_dim, 8);
  EXPECT_EQ(back.model.attention.rope_base, 10000.0);
  EXPECT_EQ(json(model_file_json(back.model)), load(path));
  json j = load(path);
  j["attention"]["groups"] = 3;  // 4 heads cannot share 3 groups
  EXPECT_THROW(read_model_file(write_json("bad_attention.json", j)), std::invalid_argument);
  j["attention"] = {{"heads", 4}, {"head_dim", 8}, {"window", 2}};
  EXPECT_THROW(read_model_file(write_json("unknown_attention_key.json", j)), std::invalid_argument);

  const ModelFile golden = read_model_file(kCases / "attention_block" / "case.json");
  EXPECT_EQ(golden.model.attention.heads, 4);
  EXPECT_EQ(golden.model.attention.groups, 2);
  EXPECT_EQ(golden.model.attention.head_dim, 4);
}

TEST(ModelFile, OursDefaultsTheRunShape) {
  json j = load(kModels / "tiny-v4.moe-model.json");
  j.erase("seq");
  j.erase("micro_batch");
  j.erase("num_dense_layers");
  const ModelFile m = read_model_file(write_json("tiny.json", j));
  expect_depth(m.model, {4, 0, 1, 64, kDefaultSeq, kDefaultMicroBatch});
  EXPECT_TRUE(has_entry(m.assumptions, "seq absent: taken as 4096"));
  EXPECT_TRUE(has_entry(m.assumptions, "micro_batch absent: taken as 1"));
}

// --- golden cases ---------------------------------------------------------------------------------------------

TEST(ModelFile, GoldenLayerCases) {
  const ModelFile gate = read_model_file(kCases / "shared_expert_gate" / "case.json");
  EXPECT_EQ(gate.source, "moe-golden/1");
  EXPECT_EQ(gate.model.name, "shared_expert_gate");
  EXPECT_EQ(gate.model.config.shared_expert_ffn_hidden, 6);
  EXPECT_TRUE(gate.model.config.shared_expert_gate);
  EXPECT_EQ(gate.model.config.score_function, ScoreFunction::sigmoid);
  expect_depth(gate.model, {1, 0, 0, 64, 8, 2});

  const ModelFile v2 = read_model_file(kCases / "seq_aux_padding_megatron" / "case.json");
  EXPECT_EQ(v2.source, "moe-golden/2");
  EXPECT_EQ(v2.model.config.semantics.spec(),
            load(kCases / "seq_aux_padding_megatron" / "case.json")["config"]["semantics"]);
  EXPECT_EQ(v2.model.config.aux_loss_type, AuxLossType::seq_aux);

  // Hash routing: the vocabulary is the case's table's (tid2eid.npy is [16, 2]).
  const ModelFile hash = read_model_file(kCases / "hash_softmax" / "case.json");
  EXPECT_TRUE(hash.model.config.hash_routing);
  expect_depth(hash.model, {1, 0, 1, 16, 8, 2});
  EXPECT_TRUE(has_entry(hash.assumptions, "tid2eid.npy"));
}

TEST(ModelFile, GoldenHashCaseWithoutItsTable) {
  // Only case.json: the vocabulary is 64, or num_experts when that is more.
  json j = load(kCases / "hash_softmax" / "case.json");
  j["config"]["num_experts"] = 80;
  const ModelFile m = read_model_file(write_json("case.json", j));
  EXPECT_EQ(m.model.vocab, 80);
}

TEST(ModelFile, GoldenModelCase) {
  const ModelFile m = read_model_file(kCases / "hash_layer" / "case.json");
  EXPECT_EQ(m.source, "moe-golden-model/1");
  EXPECT_EQ(m.model.config.shared_expert_ffn_hidden, 4);
  EXPECT_EQ(m.model.config.aux_loss_coeff, 0.05);
  expect_depth(m.model, {2, 0, 1, 16, 8, 1});
  EXPECT_TRUE(has_entry(m.ignored, "layout = tp 1, cp 2, dp 1"));
}

// --- keys not read, refusals ----------------------------------------------------------------------------------

TEST(ModelFile, UnknownKeysAreListed) {
  json j = load(kModels / "qwen3-30b-a3b.json");
  j["moe_router_temperature"] = 0.7;
  const ModelFile m = read_model_file(write_json("qwen.json", j));
  ASSERT_EQ(unknown_entries(m).size(), 1u);
  EXPECT_EQ(unknown_entries(m)[0].rfind("unknown: moe_router_temperature = 0.7", 0), 0u) << unknown_entries(m)[0];
}

TEST(ModelFile, RefusesUnknownModelType) {
  expect_refused(variant("mixtral-8x7b.json", "model_type", "llama"), "'model_type' is \"llama\"");
  expect_error("qwen3_moe", [] { read_model_file(variant("mixtral-8x7b.json", "model_type", "llama")); });
}

TEST(ModelFile, RefusesUnmodelledKeys) {
  expect_refused(variant("deepseek-v3.json", "moe_layer_freq", 2), "'moe_layer_freq' is 2");
  expect_refused(variant("mixtral-8x7b.json", "router_jitter_noise", 0.1), "'router_jitter_noise' is 0.1");
  expect_refused(variant("qwen3-30b-a3b.json", "decoder_sparse_step", 2), "'decoder_sparse_step' is 2");
  expect_refused(variant("qwen3-30b-a3b.json", "mlp_only_layers", json::array({0, 47})), "'mlp_only_layers' is [0,47]");
  expect_refused(variant("qwen3-30b-a3b.json", "hidden_act", "gelu"), "'hidden_act' is \"gelu\"");
  expect_refused(variant("deepseek-v3.json", "norm_topk_prob", false), "'norm_topk_prob' is false");
  expect_refused(variant("deepseek-v3.json", "topk_group", 2), "'topk_group' is 2");
  expect_refused(variant("deepseek-v3.json", "first_k_dense_replace", 61), "'first_k_dense_replace' is 61");
  expect_refused(variant("deepseek-v3.json", "scoring_func", "softmax"), "'topk_method' is \"noaux_tc\"");
  // DeepSeek-V2's own group rule (best expert per group) with k / topk_group = 2.
  json v2 = deepseek_v2_lite();
  v2["topk_method"] = "group_limited_greedy";
  v2["n_group"] = 8;
  v2["topk_group"] = 3;
  expect_refused(write_json("v2.json", v2), "'topk_group' is 3");
}

TEST(ModelFile, RefusesMissingKeys) {
  expect_refused(variant("qwen3-30b-a3b.json", "hidden_size", json::value_t::discarded),
                 "required key 'hidden_size' is missing");
  expect_refused(variant("deepseek-v3.json", "scoring_func", json::value_t::discarded),
                 "required key 'scoring_func' is missing");
  expect_refused(variant("tiny-v4.moe-model.json", "vocab", json::value_t::discarded),
                 "required key 'vocab' is missing");
}

TEST(ModelFile, RefusesMalformedFiles) {
  const fs::path broken = scratch() / "broken.json";
  std::ofstream(broken) << "{\"model_type\": \"mixtral\",";
  expect_refused(broken, "not valid JSON");
  expect_refused(variant("tiny-v4.moe-model.json", "layers", 4), "unknown key 'layers'");
  expect_refused(variant("tiny-v4.moe-model.json", "format", "moe-model/2"), "'format' is \"moe-model/2\"");
  expect_refused(variant("tiny-v4.moe-model.json", "n_hash_layers", 5), "n_hash_layers must be in [0, num_layers]");
  expect_refused(write_json("neither.json", {{"hidden_size", 8}}), "neither 'format'");
  expect_refused(variant("qwen3-30b-a3b.json", "num_experts", "128"), "'num_experts' must be an integer");
  expect_refused(scratch() / "absent.json", "missing (no such file)");
}

// The shared JSON reader's limits reach --model: a FIFO is refused without blocking (the old reader waited for a
// writer forever), a device without reading it (/dev/zero ran until memory ran out), and a 200,000-deep value
// while parsing (the old reader parsed it, then overflowed the stack echoing it in a message).
TEST(ModelFile, RefusesWhatTheSharedJsonReaderRefuses) {
  const fs::path fifo = scratch() / "config.fifo";
  fs::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_refused(fifo, "is not a regular file");
  expect_error("/dev/zero: is not a regular file", [] { read_model_file("/dev/zero"); });
  const fs::path deep = scratch() / "deep.json";
  std::ofstream(deep) << R"({"model_type": "qwen3_moe", "unknown_key": )" << std::string(200000, '[')
                      << std::string(200000, ']') << "}";
  expect_refused(deep, "nested deeper than");
  const fs::path twice = scratch() / "twice.json";
  std::ofstream(twice) << R"({"model_type": "qwen3_moe", "num_experts": 128, "num_experts": 64})";
  expect_refused(twice, "\"num_experts\" appears twice");
}

// n_shared_experts × moe_intermediate_size in 64 bits: 2^21 × 2048 = 2^32 wrapped to 0 in int and the shared
// expert was dropped silently; now refused, naming both keys.
TEST(ModelFile, RefusesASharedExpertWidthPastInt) {
  expect_refused(variant("deepseek-v3.json", "n_shared_experts", 1 << 21), "'n_shared_experts' 2097152 × "
                                                                            "'moe_intermediate_size' 2048");
  expect_refused(variant("deepseek-v3.json", "n_shared_experts", 1 << 20), "at most 2^31 - 1");  // 2^31: one past
}

}  // namespace
}  // namespace moe::model_files
