// What `moe-oracle config` answers about a model, and what the Python module's map_hf_config returns: the oracle's
// MoE layer as the golden config keys that a dump's or a case's "config" holds (golden/README.md), the hash layers'
// config when the model has some, the depth, and the notes of the mapping. One function for both, so that a capture
// of a live block (python/moe_capture_hf.py) and `moe-oracle config --model config.json` cannot disagree on what a
// config means.
#pragma once

#include "model_files/model_file.hpp"
#include "reference/presets.hpp"
#include "reference/semantics.hpp"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace moe::model_files {

// A model file's assumptions and ignored keys as note lines: "assumed: …" per assumption, each unknown key in full,
// and the keys with no effect on the MoE layer named on one line (their reasons stay in `ignored`).
std::vector<std::string> mapping_notes(const ModelFile& file);

// {"moe_oracle": version, "model": source, "semantics": spec, "config": {golden keys}, "hash_layer_config": {…} or
// null, "num_layers", "n_hash_layers", "notes"}, keys in that order. `model` is validated (a preset, or a file as
// read_model_file gives it); `source` names it ("tiny-v4", model_source's "path (format)").
nlohmann::ordered_json layer_config_answer(const LayerPreset& model, const std::string& source,
                                           const Semantics& semantics, const std::vector<std::string>& notes);

}  // namespace moe::model_files
