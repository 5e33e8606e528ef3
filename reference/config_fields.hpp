// The fields of a MoeConfig that describe the layer, and of an AttentionConfig, each under its name in the golden
// format (golden/README.md), in that README's order: the one list of keys for every writer of a config (golden's
// case.json and model files, the checkpoint's record of the model it belongs to, the Python module's dicts).
// fp8_dispatch and bf16_storage are how a run computes, not the layer, and semantics is written by each format its
// own way (format 2, the checkpoint), so none of them is listed.
//   for_each_field(config, [&](std::string_view key, const auto& value) { ... });
// `value` is an int, bool, double, std::optional<double> or one of the config's named enums.
#pragma once

#include "reference/attention.hpp"
#include "reference/config.hpp"

#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

namespace moe {

template <typename Visit>
void for_each_field(const MoeConfig& c, Visit&& visit) {
  visit("hidden", c.hidden);
  visit("num_experts", c.num_experts);
  visit("topk", c.topk);
  visit("ffn_hidden", c.ffn_hidden);
  visit("score_function", c.score_function);
  visit("pre_softmax", c.pre_softmax);
  visit("topk_scaling_factor", c.topk_scaling_factor);
  visit("normalization", c.normalization);
  visit("expert_bias", c.expert_bias);
  visit("num_groups", c.num_groups);
  visit("group_topk", c.group_topk);
  visit("hash_routing", c.hash_routing);
  visit("swiglu_clamp", c.swiglu_clamp);
  visit("shared_expert_ffn_hidden", c.shared_expert_ffn_hidden);
  visit("shared_expert_gate", c.shared_expert_gate);
  visit("shared_expert_clamp", c.shared_expert_clamp);
  visit("latent_size", c.latent_size);
  visit("apply_probs_on_input", c.apply_probs_on_input);
  visit("capacity_factor", c.capacity_factor);
  visit("drop_policy", c.drop_policy);
  visit("pad_to_capacity", c.pad_to_capacity);
  visit("aux_loss_type", c.aux_loss_type);
  visit("aux_loss_coeff", c.aux_loss_coeff);
  visit("z_loss_coeff", c.z_loss_coeff);
  visit("bias_update_rate", c.bias_update_rate);
}

template <typename Visit>
void for_each_field(const AttentionConfig& a, Visit&& visit) {
  visit("heads", a.heads);
  visit("groups", a.groups);
  visit("head_dim", a.head_dim);
  visit("rope_base", a.rope_base);
}

// The fields as a JSON object of type Json (nlohmann::json or ordered_json: reference/ includes no JSON library):
// enums by name; an unset optional, and the aux-loss type none, as null.
template <typename Json, typename Config>
Json fields_json(const Config& config) {
  Json j = Json::object();
  for_each_field(config, [&j](std::string_view key, const auto& value) {
    using T = std::decay_t<decltype(value)>;
    Json& slot = j[std::string(key)];
    if constexpr (std::is_same_v<T, std::optional<double>>)
      slot = value ? Json(*value) : Json(nullptr);
    else if constexpr (std::is_same_v<T, AuxLossType>)
      slot = value == AuxLossType::none ? Json(nullptr) : Json(std::string(name_of(value)));
    else if constexpr (std::is_enum_v<T>)
      slot = std::string(name_of(value));
    else
      slot = value;
  });
  return j;
}

}  // namespace moe
