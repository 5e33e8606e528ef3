// Configs from dicts: a layer config through golden/'s strict case.json reader (plus the "semantics" key, which the
// golden format has no place for: a golden case is always the intended objective), a model config around it, and
// the named presets to start from.
#include "formats/config_json.hpp"
#include "python/src/arrays.hpp"
#include "python/src/bindings.hpp"
#include "reference/presets.hpp"

#include <pybind11/stl.h>

#include <cstdint>
#include <limits>
#include <set>
#include <stdexcept>

namespace moe::python {
namespace {

int integer_key(const nlohmann::json& object, const std::string& key, int fallback) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return fallback;
  if (!it->is_number_integer()) throw std::invalid_argument("model config: '" + key + "' must be an integer");
  // get<int> would wrap modulo 2^32 (vocab 2^32 + 64 read as 64): refuse what an int cannot hold.
  const bool in_range = it->is_number_unsigned()
                            ? it->get<std::uint64_t>() <= static_cast<std::uint64_t>(std::numeric_limits<int>::max())
                            : it->get<std::int64_t>() >= std::numeric_limits<int>::min() &&
                                  it->get<std::int64_t>() <= std::numeric_limits<int>::max();
  if (!in_range)
    throw std::invalid_argument("model config: '" + key + "' = " + it->dump() + " is out of range (at most " +
                                std::to_string(std::numeric_limits<int>::max()) + ")");
  return it->get<int>();
}

py::object attention_to_dict(const AttentionConfig& a) { return python_from_json(formats::attention_to_json(a)); }

AttentionConfig attention_from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw std::invalid_argument("model config: 'attention' must be a dict");
  return formats::attention_from_json(j, "model config: attention");
}

py::dict model_config_to_dict(const ModelConfig& c) {
  py::dict d;
  d["layer"] = layer_config_to_dict(c.layer);
  d["num_layers"] = c.num_layers;
  d["n_hash_layers"] = c.n_hash_layers;
  d["vocab"] = c.vocab;
  d["rms_eps"] = c.rms_eps;
  if (c.has_attention()) d["attention"] = attention_to_dict(c.attention);
  return d;
}

py::dict preset_to_dict(const LayerPreset& p) {
  py::dict d;
  d["name"] = p.name;
  d["description"] = p.description;
  d["config"] = layer_config_to_dict(p.config);
  d["seq"] = p.seq;
  d["batch"] = p.batch;
  d["vocab"] = p.vocab;
  d["num_layers"] = p.num_layers;
  d["num_dense_layers"] = p.num_dense_layers;
  if (p.attention.heads > 0) d["attention"] = attention_to_dict(p.attention);
  return d;
}

}  // namespace

MoeConfig layer_config_from_json(nlohmann::json config) {
  return formats::config_from_json(config);  // the golden keys and "semantics" (Semantics::parse), validated there
}

MoeConfig layer_config_from_dict(py::handle config) {
  if (!py::isinstance<py::dict>(config)) throw std::invalid_argument("config must be a dict");
  return layer_config_from_json(json_from_python(config, "config"));
}

py::dict layer_config_to_dict(const MoeConfig& config) {
  auto d = python_from_json(formats::config_to_json(config)).cast<py::dict>();
  if (!config.semantics.intended()) d["semantics"] = config.semantics.spec();
  return d;
}

ModelConfig model_config_from_dict(py::handle config) {
  if (!py::isinstance<py::dict>(config)) throw std::invalid_argument("model config must be a dict");
  const nlohmann::json j = json_from_python(config, "model config");
  static const std::set<std::string> known{"layer", "num_layers", "n_hash_layers", "vocab", "rms_eps", "attention"};
  for (const auto& [key, value] : j.items()) {
    if (!known.count(key))
      throw std::invalid_argument("model config: unknown key '" + key +
                                  "' (known: layer, num_layers, n_hash_layers, vocab, rms_eps, attention)");
  }
  for (const char* required : {"layer", "vocab"}) {
    if (!j.contains(required) || j[required].is_null())
      throw std::invalid_argument(std::string("model config: required key '") + required + "' is missing");
  }
  ModelConfig c;
  c.layer = layer_config_from_json(j["layer"]);
  c.vocab = integer_key(j, "vocab", 0);
  c.num_layers = integer_key(j, "num_layers", c.num_layers);
  c.n_hash_layers = integer_key(j, "n_hash_layers", c.n_hash_layers);
  if (j.contains("rms_eps") && !j["rms_eps"].is_null()) {
    if (!j["rms_eps"].is_number()) throw std::invalid_argument("model config: 'rms_eps' must be a number");
    c.rms_eps = j["rms_eps"].get<double>();
  }
  if (j.contains("attention") && !j["attention"].is_null()) c.attention = attention_from_json(j["attention"]);
  c.validate();
  return c;
}

void bind_config(py::module_& m) {
  m.def(
      "layer_config", [](const py::dict& config) { return layer_config_to_dict(layer_config_from_dict(config)); },
      py::arg("config"),
      R"doc(Validate a layer config dict and return it complete.

The keys are those of a golden case's ``config`` (golden/README.md): ``hidden``, ``num_experts``,
``topk``, ``ffn_hidden``, ``score_function`` are required; absent or None keys take their defaults. One more key is
accepted: ``semantics``, a spec string such as ``"megatron-core-0.19"`` or ``"intended,+ce-per-cp-rank"`` (see
``Semantics``). Unknown keys, wrong types and invalid combinations raise ValueError with the C++ message.

Returns every key in the golden order; ``semantics`` only when it is not ``intended``.)doc");

  m.def(
      "model_config", [](const py::dict& config) { return model_config_to_dict(model_config_from_dict(config)); },
      py::arg("config"),
      R"doc(Validate a model config dict and return it complete.

Keys: ``layer`` (a layer config dict, see ``layer_config``; every MoE layer's options), ``vocab`` (required),
``num_layers`` (default 1), ``n_hash_layers`` (the first n layers route by tid2eid; default 0), ``rms_eps``
(default 1e-6), ``attention`` (optional: ``{"heads": H, "groups": G, "head_dim": d, "rope_base": 10000.0}``, causal
GQA attention with RoPE before the MoE in every block; groups default to the heads). Unknown keys raise
ValueError.)doc");

  m.def(
      "presets",
      [] {
        py::dict out;
        for (const auto& p : layer_presets()) out[py::str(p.name)] = preset_to_dict(p);
        return out;
      },
      R"doc(The named layer presets, by name: {name: {description, config, seq, batch, vocab, num_layers,
num_dense_layers, and attention where the preset has it}}. ``tiny-v4`` and ``tiny-v3`` are test-sized; the others are full size (for accounting).)doc");
}

}  // namespace moe::python
