// The Hugging Face half of read_model_file (model_file.hpp): a config.json, told by its "model_type", mapped onto a
// LayerPreset. The mapping per model type, with every assumption it makes, is the table in models/README.md.
#pragma once

#include "reference/named.hpp"
#include "model_files/model_file.hpp"

#include <nlohmann/json_fwd.hpp>

#include <string>

namespace moe::model_files {

// The model types the mapping knows (config.json's "model_type"), in the order error messages list them.
enum class HfModelType { deepseek_v2, deepseek_v3, deepseek_v4, mixtral, qwen2_moe, qwen3_moe };
inline constexpr Named<HfModelType> kHfModelTypes[] = {
    {HfModelType::deepseek_v2, "deepseek_v2"}, {HfModelType::deepseek_v3, "deepseek_v3"},
    {HfModelType::deepseek_v4, "deepseek_v4"}, {HfModelType::mixtral, "mixtral"},
    {HfModelType::qwen2_moe, "qwen2_moe"},     {HfModelType::qwen3_moe, "qwen3_moe"}};

// `root` is a parsed config.json (an object with "model_type"); `name` becomes model.name. Throws
// std::invalid_argument with one line naming the key (not the file: read_model_file adds it). The config is
// validated; depth, vocab and run shape are not (read_model_file checks them for every format). The semantics'
// mapped deviations apply here (v2-gate-softmax-scaled: DeepSeek-V2's gate as transformers computes it).
ModelFile model_from_hf_config(const nlohmann::json& root, const std::string& name, const Semantics& semantics = {});

}  // namespace moe::model_files
