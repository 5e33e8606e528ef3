#include "golden/case_json.hpp"

#include "golden/strict_json.hpp"
#include "reference/config_fields.hpp"

#include <nlohmann/json.hpp>

namespace moe::golden {

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
    if (*aux == "none") throw CaseFormatError("config: 'aux_loss_type' is aux, seq_aux, global_aux or null");
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
        throw CaseFormatError(std::string("config: 'semantics': ") + e.what());
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
    throw CaseFormatError(where + ": " + e.what());
  }
  return a;
}

nlohmann::ordered_json attention_to_json(const AttentionConfig& a) { return fields_json<nlohmann::ordered_json>(a); }

nlohmann::ordered_json config_to_json(const MoeConfig& c) { return fields_json<nlohmann::ordered_json>(c); }

std::string_view CaseHeader::format() const {
  return config.semantics.intended() && !padding_mask && written_by.empty() ? kCaseFormat : kCaseFormatV2;
}

std::string case_format_of(const json& root, const std::string& origin) {
  if (!root.is_object()) throw CaseFormatError(origin + " must be a JSON object");
  const auto it = root.find("format");
  if (it == root.end() || it->is_null())
    throw CaseFormatError(origin + ": no 'format' (expected \"" + std::string(kCaseFormat) + "\")");
  if (!it->is_string()) throw CaseFormatError(origin + ": 'format' must be a string");
  return it->get<std::string>();
}

CaseHeader case_header_from_json(const json& root, const std::string& origin) {
  const std::string version = case_format_of(root, origin);
  if (version != kCaseFormat && version != kCaseFormatV2) {
    throw CaseFormatError(origin + ": case format '" + version + "' is not supported; this build reads '" +
                          std::string(kCaseFormat) + "' and '" + std::string(kCaseFormatV2) + "'" +
                          (version.rfind("moe-golden/", 0) == 0 ? " (written by a newer release?)" : ""));
  }
  StrictObject top(root, origin);
  top.find("format");
  CaseHeader h;
  h.description = top.optional_string("description").value_or("");
  if (version == kCaseFormatV2) h.written_by = top.optional_string("written_by").value_or("");
  try {
    h.config = config_from_json(top.required("config"), version == kCaseFormatV2);
  } catch (const std::invalid_argument& e) {  // MoeConfig::validate and the enum parsers
    throw CaseFormatError(origin + ": " + e.what());
  } catch (const CaseFormatError& e) {
    throw CaseFormatError(origin + ": " + e.what());
  }
  StrictObject shape(top.required("shape"), origin + ": shape");
  h.seq = shape.integer("seq", shape.required("seq"));
  h.batch = shape.integer("batch", shape.required("batch"));
  shape.reject_unknown();
  if (h.seq <= 0 || h.batch <= 0) throw CaseFormatError(origin + ": shape seq and batch must be > 0");
  h.tolerance = tolerance_from(top, origin);
  top.reject_unknown();
  return h;
}

nlohmann::ordered_json case_header_to_json(const CaseHeader& h) {
  nlohmann::ordered_json j;
  j["format"] = std::string(h.format());
  j["description"] = h.description;
  if (!h.written_by.empty()) j["written_by"] = h.written_by;
  j["config"] = config_to_json(h.config);
  if (h.format() == kCaseFormatV2) j["config"]["semantics"] = h.config.semantics.spec();
  j["shape"]["seq"] = h.seq;
  j["shape"]["batch"] = h.batch;
  j["tolerance"]["rtol"] = h.tolerance.rtol;
  j["tolerance"]["atol"] = h.tolerance.atol;
  return j;
}

}  // namespace moe::golden
