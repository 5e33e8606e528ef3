// The keys of a Hugging Face config.json as the model-type mappings (hf_config.cpp) read them: typed reads that
// remember what was read, so that every key left over is reported, ignored with its reason or flagged unknown.
#pragma once

#include "reference/named.hpp"
#include "model_files/model_file.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
#include <optional>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

namespace moe::model_files::hf {

using nlohmann::json;

// A value as it appears in the file, cut short for an `ignored` line (quantization_config is an object).
inline std::string show(const json& v) {
  std::string s = v.dump();
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

inline std::string quoted(const std::string& s) { return "\"" + s + "\""; }

// Keys of the Hugging Face configs that do not change the MoE layer, and why. A key a mapping reads is never
// looked up here, so "intermediate_size" is Mixtral's expert width and everyone else's dense FFN.
struct NotMoeKey {
  std::string_view key;
  std::string_view why;
};
inline constexpr NotMoeKey kNotMoe[] = {
    {"_name_or_path", "where HF loaded the config from"},
    {"architectures", "the HF model class"},
    {"auto_map", "the HF code that loads the model"},
    {"transformers_version", "the version that wrote the file"},
    {"torch_dtype", "storage precision; the oracle computes in double"},
    {"dtype", "storage precision; the oracle computes in double"},
    {"quantization_config", "weight storage format; the oracle computes in double"},
    {"bos_token_id", "tokenizer"},
    {"eos_token_id", "tokenizer"},
    {"pad_token_id", "tokenizer"},
    {"use_cache", "inference KV cache"},
    {"tie_word_embeddings", "embedding and head, outside the MoE layer"},
    {"initializer_range", "initialisation, not the computation"},
    {"output_router_logits",
     "whether HF returns the router logits (and so computes its aux loss); router_aux_loss_coef is mapped whatever "
     "it says"},
    {"num_attention_heads", "attention"},
    {"num_key_value_heads", "attention"},
    {"head_dim", "attention"},
    {"attention_bias", "attention"},
    {"attention_dropout", "attention"},
    {"sliding_window", "attention"},
    {"use_sliding_window", "attention"},
    {"max_window_layers", "attention"},
    {"kv_lora_rank", "attention (MLA)"},
    {"q_lora_rank", "attention (MLA)"},
    {"qk_nope_head_dim", "attention (MLA)"},
    {"qk_rope_head_dim", "attention (MLA)"},
    {"v_head_dim", "attention (MLA)"},
    {"qk_head_dim", "attention (MLA: qk_nope_head_dim + qk_rope_head_dim)"},
    {"qkv_bias", "attention"},
    {"rope_interleave", "positions"},
    {"rope_theta", "positions"},
    {"rope_scaling", "positions"},
    {"max_position_embeddings", "the context limit, not a training sequence (seq is taken as 4096)"},
    {"rms_norm_eps", "the RMSNorm around the MoE layer, not in it"},
    {"intermediate_size", "the dense FFN's width (dense blocks), not the MoE layer's"},
    {"pretraining_tp", "tensor parallelism of the original training: a layout, not the numbers"},
    {"ep_size", "expert parallelism of HF's inference code: a layout, not the numbers"},
    {"num_nextn_predict_layers",
     "multi-token-prediction modules: not modelled and not counted in num_layers (their MoE layer has this config)"},
    // DeepSeek-V4: the residual stream and the attention around its MoE blocks.
    {"hc_mult", "mHC residual streams (DeepSeek-V4): they form the MoE block's input, not its computation"},
    {"hc_sinkhorn_iters", "mHC residual mixing (DeepSeek-V4): outside the MoE layer"},
    {"hc_eps", "mHC residual mixing (DeepSeek-V4): outside the MoE layer"},
    {"compress_ratios", "attention (DeepSeek-V4's compressed KV per layer)"},
    {"compress_rates", "attention (DeepSeek-V4's compressed KV)"},
    {"compress_rate_csa", "attention (DeepSeek-V4's compressed KV)"},
    {"compress_rate_hca", "attention (DeepSeek-V4's compressed KV)"},
    {"compress_rope_theta", "positions of the compressed KV (attention)"},
    {"layer_types", "the attention kind of each block"},
    {"index_n_heads", "attention (DeepSeek-V4's lightning indexer)"},
    {"index_head_dim", "attention (DeepSeek-V4's lightning indexer)"},
    {"index_topk", "attention (DeepSeek-V4's lightning indexer)"},
    {"o_groups", "attention (DeepSeek-V4's grouped output projection)"},
    {"o_lora_rank", "attention (DeepSeek-V4's grouped output projection)"},
    {"partial_rotary_factor", "positions"},
    {"rope_parameters", "positions"},
    {"expert_dtype", "the routed experts' weight storage (FP4 in V4-Flash); the oracle computes in double"},
};

// The keys of one config.json: typed reads that remember what was read, so that every key left over is reported
// (ignored with its reason, or unknown). An absent key and a null one are the same (HF writes null for "unset").
// Errors name the key; read_model_file adds the file.
class HfKeys {
 public:
  HfKeys(const json& root, ModelFile& out) : root_(root), out_(out) {}

  const json* find(const std::string& key) {
    read_.insert(key);
    const auto it = root_.find(key);
    return it == root_.end() || it->is_null() ? nullptr : &*it;
  }
  const json& required(const std::string& key) {
    const json* v = find(key);
    if (!v) throw std::invalid_argument("required key '" + key + "' is missing");
    return *v;
  }

  int integer(const std::string& key) { return as_integer(key, required(key)); }
  std::optional<int> optional_integer(const std::string& key) {
    const json* v = find(key);
    return v ? std::optional<int>(as_integer(key, *v)) : std::nullopt;
  }
  bool boolean(const std::string& key) { return as_boolean(key, required(key)); }
  std::string string(const std::string& key) { return as_string(key, required(key)); }

  // An absent key takes `fallback`, and the assumption says so, with `why`.
  int integer_or(const std::string& key, int fallback, const std::string& why) {
    const json* v = find(key);
    if (!v) assume(key, std::to_string(fallback), why);
    return v ? as_integer(key, *v) : fallback;
  }
  double number_or(const std::string& key, double fallback, const std::string& why) {
    const json* v = find(key);
    if (!v) assume(key, show(json(fallback)), why);
    return v ? as_number(key, *v) : fallback;
  }
  bool boolean_or(const std::string& key, bool fallback, const std::string& why) {
    const json* v = find(key);
    if (!v) assume(key, fallback ? "true" : "false", why);
    return v ? as_boolean(key, *v) : fallback;
  }
  double number(const std::string& key, const json& v) { return as_number(key, v); }

  // A string key whose value must be one of `table`'s names; an absent key takes `fallback` (choice_or).
  template <typename E>
  E choice(const std::string& key, std::span<const Named<E>> table) {
    return as_choice(key, string(key), table);
  }
  template <typename E>
  E choice_or(const std::string& key, E fallback, const std::string& why, std::span<const Named<E>> table) {
    const json* v = find(key);
    if (!v) assume(key, quoted(std::string(name_of(fallback, table))), why);
    return v ? as_choice(key, as_string(key, *v), table) : fallback;
  }

  // A key this model's mapping reads and does not use: listed in `ignored` when the file has it.
  void ignore(const std::string& key, const std::string& why) {
    if (const json* v = find(key)) out_.ignored.push_back(key + " = " + show(*v) + ": " + why);
  }

  // Every key not read: known not to touch the MoE layer, or unknown (flagged, never dropped silently).
  void report_rest(const std::string& model_type) {
    for (const auto& [key, value] : root_.items()) {
      if (read_.count(key)) continue;
      std::string_view why;
      for (const auto& k : kNotMoe)
        if (k.key == key) why = k.why;
      if (!why.empty()) {
        out_.ignored.push_back(key + " = " + show(value) + ": " + std::string(why));
      } else {
        out_.ignored.push_back("unknown: " + key + " = " + show(value) + " (not read by the " + model_type +
                               " mapping; check that it does not change the MoE layer)");
      }
    }
  }

 private:
  void assume(const std::string& key, const std::string& value, const std::string& why) {
    out_.assumptions.push_back(key + " absent: taken as " + value + " (" + why + ")");
  }
  static int as_integer(const std::string& key, const json& v) {
    if (!v.is_number_integer() || v.get<std::int64_t>() < std::numeric_limits<int>::min() ||
        v.get<std::int64_t>() > std::numeric_limits<int>::max())
      throw std::invalid_argument("'" + key + "' must be an integer, got " + show(v));
    return v.get<int>();
  }
  static double as_number(const std::string& key, const json& v) {
    if (!v.is_number()) throw std::invalid_argument("'" + key + "' must be a number, got " + show(v));
    return v.get<double>();
  }
  static bool as_boolean(const std::string& key, const json& v) {
    if (!v.is_boolean()) throw std::invalid_argument("'" + key + "' must be true or false, got " + show(v));
    return v.get<bool>();
  }
  template <typename E>
  static E as_choice(const std::string& key, const std::string& text, std::span<const Named<E>> table) {
    if (const auto value = find_named(text, table)) return *value;
    throw std::invalid_argument("'" + key + "' is " + quoted(text) + ": " + name_list(table) + " map");
  }
  static std::string as_string(const std::string& key, const json& v) {
    if (!v.is_string()) throw std::invalid_argument("'" + key + "' must be a string, got " + show(v));
    return v.get<std::string>();
  }

  const json& root_;
  ModelFile& out_;
  std::set<std::string> read_;
};

}  // namespace moe::model_files::hf
