#include "formats/config_json.hpp"

#include "formats/strict_json.hpp"
#include "reference/config_fields.hpp"

#include <nlohmann/json.hpp>

namespace moe::formats {

using nlohmann::json;

MoeConfig config_from_json(const json& object, bool semantics_key) {
  StrictObject o(object, "config");
  MoeConfig c;
  c.hidden = o.integer("hidden", o.required("hidden"));
  c.num_experts = o.integer("num_experts", o.required("num_experts"));
  c.topk = o.integer("topk", o.required("topk"));
  c.ffn_hidden = o.integer("ffn_hidden", o.required("ffn_hidden"));
  c.score_function = parse_score_function(o.string("score_function", o.required("score_function")));
  c.pre_softmax = o.boolean("pre_softmax", false);
  c.topk_scaling_factor = o.number("topk_scaling_factor", 1.0);
  c.normalization = parse_normalization(o.optional_string("normalization").value_or("megatron"));
  c.expert_bias = o.boolean("expert_bias", false);
  c.num_groups = o.integer("num_groups", 0);
  c.group_topk = o.integer("group_topk", 0);
  c.hash_routing = o.boolean("hash_routing", false);
  c.swiglu_clamp = o.optional_number("swiglu_clamp");
  c.shared_expert_ffn_hidden = o.integer("shared_expert_ffn_hidden", 0);
  c.shared_expert_gate = o.boolean("shared_expert_gate", false);
  c.shared_expert_clamp = o.boolean("shared_expert_clamp", false);
  c.latent_size = o.integer("latent_size", 0);
  c.apply_probs_on_input = o.boolean("apply_probs_on_input", false);
  c.capacity_factor = o.optional_number("capacity_factor");
  c.drop_policy = parse_drop_policy(o.optional_string("drop_policy").value_or("probs"));
  c.pad_to_capacity = o.boolean("pad_to_capacity", false);
  if (const auto aux = o.optional_string("aux_loss_type")) {
    if (*aux == "none") throw FormatError("config: 'aux_loss_type' is aux, seq_aux, global_aux or null");
    c.aux_loss_type = parse_aux_loss_type(*aux);
  }
  c.aux_loss_coeff = o.number("aux_loss_coeff", 0.0);
  c.z_loss_coeff = o.number("z_loss_coeff", 0.0);
  c.bias_update_rate = o.optional_number("bias_update_rate");
  if (semantics_key) {
    if (const auto spec = o.optional_string("semantics")) {
      try {
        c.semantics = Semantics::parse(*spec);
      } catch (const std::invalid_argument& e) {
        throw FormatError(std::string("config: 'semantics': ") + e.what());
      }
    }
  }
  o.reject_unknown();
  c.validate();
  return c;
}

AttentionConfig attention_from_json(const json& block, const std::string& where) {
  StrictObject attention(block, where);
  AttentionConfig a;
  a.heads = attention.integer("heads", attention.required("heads"));
  a.groups = attention.integer("groups", a.heads);
  a.head_dim = attention.integer("head_dim", attention.required("head_dim"));
  a.rope_base = attention.number("rope_base", a.rope_base);
  attention.reject_unknown();
  try {
    a.validate();
  } catch (const std::invalid_argument& e) {
    throw FormatError(where + ": " + e.what());
  }
  return a;
}

nlohmann::ordered_json attention_to_json(const AttentionConfig& a) { return fields_json<nlohmann::ordered_json>(a); }

nlohmann::ordered_json config_to_json(const MoeConfig& c) { return fields_json<nlohmann::ordered_json>(c); }

}  // namespace moe::formats
