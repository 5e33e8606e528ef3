// The notes and the answer of `moe-oracle config` (layer_config_answer.hpp), computed once for the command line and
// the Python module.
#include "model_files/layer_config_answer.hpp"

#include "formats/config_json.hpp"
#include "reference/model.hpp"

#ifndef MOE_ORACLE_VERSION
#error "MOE_ORACLE_VERSION must be defined by the build (model_files/CMakeLists.txt, from the root project() VERSION)"
#endif

namespace moe::model_files {

std::vector<std::string> mapping_notes(const ModelFile& file) {
  std::vector<std::string> out;
  for (const auto& a : file.assumptions) out.push_back("assumed: " + a);
  // A known key with no effect only needs its name here; an unknown one is shown with its value, as it may be a
  // setting the mapping should have read.
  std::string keys;
  for (const auto& k : file.ignored) {
    if (k.starts_with("unknown")) out.push_back(k);
    else keys += (keys.empty() ? "" : ", ") + k.substr(0, k.find(" = "));
  }
  if (!keys.empty()) out.push_back("no effect on the MoE layer: " + keys);
  return out;
}

nlohmann::ordered_json layer_config_answer(const LayerPreset& model, const std::string& source,
                                           const Semantics& semantics, const std::vector<std::string>& notes) {
  ModelConfig m;
  m.layer = model.config;
  m.num_layers = model.num_layers;
  m.n_hash_layers = model.n_hash_layers;
  nlohmann::ordered_json out;
  out["moe_oracle"] = MOE_ORACLE_VERSION;
  out["model"] = source;
  out["semantics"] = semantics.spec();
  out["config"] = formats::config_to_json(m.layer_config(m.n_hash_layers));
  // DeepSeek-V4's first blocks route by token id: their config differs (hash_routing on, no bias, no groups).
  out["hash_layer_config"] = nullptr;
  if (m.n_hash_layers > 0) out["hash_layer_config"] = formats::config_to_json(m.layer_config(0));
  out["num_layers"] = m.num_layers;
  out["n_hash_layers"] = m.n_hash_layers;
  out["notes"] = notes;
  return out;
}

}  // namespace moe::model_files
