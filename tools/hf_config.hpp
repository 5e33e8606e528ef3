// The Hugging Face half of read_model_file (model_file.hpp): a config.json, told by its "model_type", mapped onto a
// LayerPreset. The mapping per model type, with every assumption it makes, is the table in models/README.md.
#pragma once

#include "tools/model_file.hpp"

#include <nlohmann/json_fwd.hpp>

#include <string>

namespace moe::cli {

// The model types the mapping knows, in the order error messages list them.
inline constexpr const char* kHfModelTypes = "deepseek_v2, deepseek_v3, deepseek_v4, mixtral, qwen2_moe, qwen3_moe";

// `root` is a parsed config.json (an object with "model_type"); `name` becomes model.name. Throws
// std::invalid_argument with one line naming the key (not the file: read_model_file adds it). The config is
// validated; depth, vocab and run shape are not (read_model_file checks them for every format). The semantics'
// mapped deviations apply here (v2-gate-softmax-scaled: DeepSeek-V2's gate as transformers computes it).
ModelFile model_from_hf_config(const nlohmann::json& root, const std::string& name, const Semantics& semantics = {});

}  // namespace moe::cli
