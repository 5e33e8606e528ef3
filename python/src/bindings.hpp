// The moe_oracle module's parts, one per concern (module.cpp calls each bind_*), and the dict readers they share.
// Every reader is strict as golden/'s case.json reader is: an unknown key or a wrong type is a ValueError naming it.
#pragma once

#include "reference/model.hpp"
#include "reference/parallel_layout.hpp"

#include <nlohmann/json.hpp>
#include <pybind11/pybind11.h>

namespace moe::python {

namespace py = pybind11;

// A layer config dict: the golden case.json `config` keys (formats::config_from_json, validated) plus an optional
// "semantics" spec string (Semantics::parse; absent or null = intended).
MoeConfig layer_config_from_json(nlohmann::json config);
MoeConfig layer_config_from_dict(py::handle config);
// Every key, in the golden order; "semantics" only when it is not the intended profile, so that the dict of an
// intended config is exactly a golden case's `config`.
py::dict layer_config_to_dict(const MoeConfig& config);

// {"layer": {...}, "vocab": V, "num_layers": 1, "n_hash_layers": 0, "rms_eps": 1e-6}; validated.
ModelConfig model_config_from_dict(py::handle config);

// {"world", "tp", "cp", "pp", "ep", "etp", "dp", "order"}: sizes default to 1, world to tp·cp·pp·dp, order to
// "tp-cp-ep-dp-pp"; validated (ParallelLayout::validate).
ParallelLayout layout_from_dict(py::handle layout);

void bind_config(py::module_& m);
void bind_semantics(py::module_& m);
void bind_layer(py::module_& m);
void bind_step(py::module_& m);
void bind_layout(py::module_& m);
void bind_golden(py::module_& m);
void bind_model_files(py::module_& m);

}  // namespace moe::python
