#include "golden/case_json.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>
#include <optional>
#include <set>

namespace moe::golden {
namespace {

using nlohmann::json;

// Reads the keys of one JSON object, remembering which were consumed so the rest can be reported as unknown.
class StrictObject {
 public:
  StrictObject(const json& object, std::string where) : object_(object), where_(std::move(where)) {
    if (!object_.is_object()) throw CaseFormatError(where_ + " must be a JSON object");
  }

  // nullptr when the key is absent or null.
  const json* find(const std::string& key) {
    known_.insert(key);
    const auto it = object_.find(key);
    return it == object_.end() || it->is_null() ? nullptr : &*it;
  }

  const json& required(const std::string& key) {
    const json* v = find(key);
    if (!v) throw CaseFormatError(where_ + ": required key '" + key + "' is missing");
    return *v;
  }

  int integer(const std::string& key, const json& v) {
    if (!v.is_number_integer() || v.get<std::int64_t>() < std::numeric_limits<int>::min() ||
        v.get<std::int64_t>() > std::numeric_limits<int>::max()) {
      throw CaseFormatError(where_ + ": '" + key + "' must be an integer");
    }
    return v.get<int>();
  }
  int integer(const std::string& key, int fallback) {
    const json* v = find(key);
    return v ? integer(key, *v) : fallback;
  }
  double number(const std::string& key, const json& v) {
    if (!v.is_number() || !std::isfinite(v.get<double>())) {
      throw CaseFormatError(where_ + ": '" + key + "' must be a finite number");
    }
    return v.get<double>();
  }
  double number(const std::string& key, double fallback) {
    const json* v = find(key);
    return v ? number(key, *v) : fallback;
  }
  std::optional<double> optional_number(const std::string& key) {
    const json* v = find(key);
    return v ? std::optional<double>(number(key, *v)) : std::nullopt;
  }
  bool boolean(const std::string& key, bool fallback) {
    const json* v = find(key);
    if (!v) return fallback;
    if (!v->is_boolean()) throw CaseFormatError(where_ + ": '" + key + "' must be true or false");
    return v->get<bool>();
  }
  std::string string(const std::string& key, const json& v) {
    if (!v.is_string()) throw CaseFormatError(where_ + ": '" + key + "' must be a string");
    return v.get<std::string>();
  }
  std::optional<std::string> optional_string(const std::string& key) {
    const json* v = find(key);
    return v ? std::optional<std::string>(string(key, *v)) : std::nullopt;
  }

  // Call after every key was read: any key not asked for is an error.
  void reject_unknown() const {
    for (const auto& [key, value] : object_.items()) {
      if (!known_.count(key)) throw CaseFormatError(where_ + ": unknown key '" + key + "'");
    }
  }

 private:
  const json& object_;
  std::string where_;
  std::set<std::string> known_;
};

nlohmann::ordered_json optional_to_json(const std::optional<double>& v) {
  return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json(nullptr);
}

}  // namespace

MoeConfig config_from_json(const json& object) {
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
  o.reject_unknown();
  c.validate();
  return c;
}

nlohmann::ordered_json config_to_json(const MoeConfig& c) {
  nlohmann::ordered_json j;
  j["hidden"] = c.hidden;
  j["num_experts"] = c.num_experts;
  j["topk"] = c.topk;
  j["ffn_hidden"] = c.ffn_hidden;
  j["score_function"] = std::string(to_string(c.score_function));
  j["pre_softmax"] = c.pre_softmax;
  j["topk_scaling_factor"] = c.topk_scaling_factor;
  j["normalization"] = std::string(to_string(c.normalization));
  j["expert_bias"] = c.expert_bias;
  j["num_groups"] = c.num_groups;
  j["group_topk"] = c.group_topk;
  j["hash_routing"] = c.hash_routing;
  j["swiglu_clamp"] = optional_to_json(c.swiglu_clamp);
  j["shared_expert_ffn_hidden"] = c.shared_expert_ffn_hidden;
  j["shared_expert_gate"] = c.shared_expert_gate;
  j["shared_expert_clamp"] = c.shared_expert_clamp;
  j["latent_size"] = c.latent_size;
  j["apply_probs_on_input"] = c.apply_probs_on_input;
  j["capacity_factor"] = optional_to_json(c.capacity_factor);
  j["drop_policy"] = std::string(to_string(c.drop_policy));
  j["pad_to_capacity"] = c.pad_to_capacity;
  if (c.aux_loss_type == AuxLossType::none) {
    j["aux_loss_type"] = nullptr;
  } else {
    j["aux_loss_type"] = std::string(to_string(c.aux_loss_type));
  }
  j["aux_loss_coeff"] = c.aux_loss_coeff;
  j["z_loss_coeff"] = c.z_loss_coeff;
  j["bias_update_rate"] = optional_to_json(c.bias_update_rate);
  return j;
}

CaseHeader case_header_from_json(const json& root, const std::string& origin) {
  StrictObject top(root, origin);
  const json* format = top.find("format");
  if (!format) throw CaseFormatError(origin + ": no 'format' (expected \"" + std::string(kCaseFormat) + "\")");
  const std::string version = top.string("format", *format);
  if (version != kCaseFormat) {
    throw CaseFormatError(origin + ": case format '" + version + "' is not supported; this build reads only '" +
                          std::string(kCaseFormat) + "'" +
                          (version.rfind("moe-golden/", 0) == 0 ? " (written by a newer or older release?)" : ""));
  }
  CaseHeader h;
  h.description = top.optional_string("description").value_or("");
  try {
    h.config = config_from_json(top.required("config"));
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
  StrictObject tol(top.required("tolerance"), origin + ": tolerance");
  h.tolerance.rtol = tol.number("rtol", tol.required("rtol"));
  h.tolerance.atol = tol.number("atol", tol.required("atol"));
  tol.reject_unknown();
  if (h.tolerance.rtol < 0 || h.tolerance.atol < 0) throw CaseFormatError(origin + ": tolerances must be >= 0");
  top.reject_unknown();
  return h;
}

nlohmann::ordered_json case_header_to_json(const CaseHeader& h) {
  nlohmann::ordered_json j;
  j["format"] = std::string(kCaseFormat);
  j["description"] = h.description;
  j["config"] = config_to_json(h.config);
  j["shape"]["seq"] = h.seq;
  j["shape"]["batch"] = h.batch;
  j["tolerance"]["rtol"] = h.tolerance.rtol;
  j["tolerance"]["atol"] = h.tolerance.atol;
  return j;
}

}  // namespace moe::golden
