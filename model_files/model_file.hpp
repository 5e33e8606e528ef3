// One model description from a file: the MoE layer every MoE block of the model uses, and the model's depth,
// vocabulary and default run shape (a LayerPreset), read from one of four kinds of JSON, told apart by content:
//
//   moe-model/1           ours (models/README.md): strict, a golden layer config plus the model's numbers
//   moe-golden/1, /2      a golden layer case's case.json: its config and shape as a one-layer model
//   moe-golden-model/1    a golden model case's case.json: its config, depth, vocabulary, seq and micro-batch
//   Hugging Face          a config.json with "model_type" deepseek_v2, deepseek_v3, qwen2_moe, qwen3_moe, mixtral
//
// A Hugging Face file describes a whole model, most of it not the MoE layer; the mapping says what it did with
// every key: the MoE keys become MoeConfig fields, keys that do not change the MoE layer are listed in `ignored`
// (with why), keys it does not know are listed there too, marked "unknown:", and keys that change the MoE layer
// in a way the oracle does not model are refused. Every value the file does not give is an `assumptions` entry.
#pragma once

#include "reference/presets.hpp"
#include "reference/semantics.hpp"

#include <nlohmann/json_fwd.hpp>

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace moe::model_files {

inline constexpr std::string_view kModelFormat = "moe-model/1";
// The run shape of a model file that gives none (ours without seq/micro_batch, every Hugging Face file): a
// full-size model's training sequence and one sequence per micro-batch, as the full-size presets use.
inline constexpr int kDefaultSeq = 4096;
inline constexpr int kDefaultMicroBatch = 1;
// A golden layer case has no vocabulary; this one is what `golden write` uses.
inline constexpr int kDefaultCaseVocab = 64;

struct ModelFile {
  LayerPreset model;                     // config validated; num_layers counts MoE layers only
  std::string source;                    // "moe-model/1", "moe-golden/2", "Hugging Face config.json (qwen3_moe)"
  std::vector<std::string> assumptions;  // each value not in the file, each loss or rule approximated
  std::vector<std::string> ignored;      // "key = value: why", or "unknown: key = value" — nothing dropped silently
};

// Throws std::invalid_argument with one line naming the file and the key or problem. `semantics` matters only for
// a Hugging Face file: its "mapped" deviations (reference/semantics.hpp) change how the file is mapped.
ModelFile read_model_file(const std::filesystem::path& path, const Semantics& semantics = {});

// A Hugging Face config.json that is not in a file (the Python capture of a live block holds its config as a dict):
// what read_model_file gives for a file at `origin` with this content — the same mapping, checks and one-line
// errors, named by `origin`. Anything but a Hugging Face config (no "model_type", or a "format") is refused.
ModelFile read_hf_config(const nlohmann::json& root, const std::string& origin, const Semantics& semantics = {});
// The same from the text, parsed under the limits every JSON read from outside gets (storage/json_file.hpp). Named
// apart from the overload above: a json converts from a string, so the two would be ambiguous on a literal.
ModelFile read_hf_config_text(std::string_view text, const std::string& origin, const Semantics& semantics = {});

// What a model read from `origin` came from, for headers and answers: "models/mixtral-8x7b.json (Hugging Face
// config.json (mixtral))".
std::string model_source(const std::string& origin, const ModelFile& file);

// Our format for a model: what read_model_file reads back to the same LayerPreset (the config's "semantics" is
// always written).
nlohmann::ordered_json model_file_json(const LayerPreset& model);
void write_model_file(const std::filesystem::path& path, const LayerPreset& model);

}  // namespace moe::model_files
