// read_hf_config and read_hf_config_text (a config.json held in memory) against read_model_file on the same
// content, and the answer of `moe-oracle config` (layer_config_answer.hpp): the Python module reaches the mapping
// through these, so a config given as a dict must map, and be refused, exactly as the file would.
#include "model_files/layer_config_answer.hpp"
#include "model_files/model_file.hpp"
#include "reference/tests/expect_error.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace moe::model_files {
namespace {

using moe::test::expect_error;
using nlohmann::json;
using std::filesystem::path;

const path kModels = MODELS_DIR;

std::string text_of(const path& file) {
  std::ifstream in(file);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Everything the mapping gives: our format of the model (every field), the format, assumptions and ignored keys.
void expect_same_file(const ModelFile& got, const ModelFile& want) {
  EXPECT_EQ(model_file_json(got.model).dump(), model_file_json(want.model).dump());
  EXPECT_EQ(got.source, want.source);
  EXPECT_EQ(got.assumptions, want.assumptions);
  EXPECT_EQ(got.ignored, want.ignored);
}

TEST(HfConfigInMemory, MapsAsTheFileDoes) {
  const Semantics hf = Semantics::parse("hf-transformers-5.25");
  for (const char* name : {"qwen3-30b-a3b.json", "deepseek-v3.json", "deepseek-v4-flash.json", "mixtral-8x7b.json"}) {
    SCOPED_TRACE(name);
    const path file_path = kModels / name;
    const std::string text = text_of(file_path);
    for (const Semantics& s : {Semantics{}, hf}) {
      const ModelFile file = read_model_file(file_path, s);
      expect_same_file(read_hf_config(json::parse(text), file_path.string(), s), file);
      expect_same_file(read_hf_config_text(text, file_path.string(), s), file);
    }
  }
}

TEST(HfConfigInMemory, RefusesWithTheFilesMessage) {
  json j = json::parse(text_of(kModels / "mixtral-8x7b.json"));
  j["hidden_act"] = "gelu";
  const path file_path = path(::testing::TempDir()) / "gelu-mixtral.json";
  std::ofstream(file_path) << j.dump();
  const std::string from_file = expect_error("hidden_act", [&] { read_model_file(file_path); });
  EXPECT_EQ(expect_error("hidden_act", [&] { read_hf_config(j, file_path.string()); }), from_file);
}

TEST(HfConfigInMemory, RefusesWhatIsNotAHuggingFaceConfig) {
  expect_error("config.json: the top level must be a JSON object",
               [] { read_hf_config(json::array({1, 2}), "config.json"); });
  expect_error("config.json: not a Hugging Face config.json",
               [] { read_hf_config(json::parse(text_of(kModels / "tiny-v4.moe-model.json")), "config.json"); });
  expect_error("config.json: not a Hugging Face config.json",
               [] { read_hf_config(json{{"format", "x"}, {"model_type", "mixtral"}}, "config.json"); });
  // The text is read under the limits of every JSON file read from outside: the origin named once.
  const std::string what = expect_error("block: not valid JSON", [] { read_hf_config_text("{", "block"); });
  EXPECT_EQ(what.find("block: block"), std::string::npos) << what;
  expect_error("appears twice",
               [] { read_hf_config_text(R"({"model_type": "mixtral", "model_type": "mixtral"})", "b"); });
}

TEST(LayerConfigAnswer, MappingNotes) {
  ModelFile f;
  f.assumptions = {"seq 4096"};
  f.ignored = {"rope_theta = 10000: attention", "unknown: foo = 1", "vocab_size = 32000: embedding"};
  EXPECT_EQ(mapping_notes(f), (std::vector<std::string>{"assumed: seq 4096", "unknown: foo = 1",
                                                        "no effect on the MoE layer: rope_theta, vocab_size"}));
  EXPECT_TRUE(mapping_notes(ModelFile{}).empty());
}

TEST(LayerConfigAnswer, KeysAndHashLayers) {
  const path file_path = kModels / "deepseek-v4-flash.json";
  const ModelFile f = read_model_file(file_path);
  const auto answer = layer_config_answer(f.model, model_source(file_path.string(), f), Semantics{}, mapping_notes(f));
  std::vector<std::string> keys;
  for (const auto& [key, value] : answer.items()) keys.push_back(key);
  EXPECT_EQ(keys, (std::vector<std::string>{"moe_oracle", "model", "semantics", "config", "hash_layer_config",
                                            "num_layers", "n_hash_layers", "notes"}));
  EXPECT_EQ(answer["model"], file_path.string() + " (Hugging Face config.json (deepseek_v4))");
  EXPECT_EQ(answer["semantics"], "intended");
  EXPECT_EQ(answer["n_hash_layers"], f.model.n_hash_layers);
  EXPECT_FALSE(answer["config"]["hash_routing"].get<bool>());
  EXPECT_TRUE(answer["hash_layer_config"]["hash_routing"].get<bool>());
  EXPECT_EQ(answer["notes"].size(), mapping_notes(f).size());

  const ModelFile qwen = read_model_file(kModels / "qwen3-30b-a3b.json");
  EXPECT_TRUE(layer_config_answer(qwen.model, "qwen", Semantics{}, {})["hash_layer_config"].is_null());
}

}  // namespace
}  // namespace moe::model_files
