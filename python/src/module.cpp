// moe_oracle: the MoE Oracle from Python. One module, its parts bound by concern (bindings.hpp); C++ errors arrive
// as ValueError with the C++ message (pybind11 maps std::invalid_argument to ValueError; the golden format's
// CaseFormatError and NpyError are registered below as ValueError subclasses).
#include "formats/npy.hpp"
#include "golden/case_json.hpp"
#include "python/src/bindings.hpp"

#ifndef MOE_ORACLE_VERSION
#error "MOE_ORACLE_VERSION must be defined by the build (python/CMakeLists.txt, from the root project() VERSION)"
#endif

PYBIND11_MODULE(moe_oracle, m) {
  namespace py = pybind11;
  m.doc() = R"doc(MoE Oracle: a double-precision CPU oracle of Megatron/DeepSeek-style MoE layers, numpy in and out.

layer      layer_forward, layer_backward, random_layer_inputs (one MoE layer; arrays named as in golden cases)
step       global_step, random_model_params, random_global_batch (the objective of a training step over a layout)
config     layer_config, model_config, presets
layout     parallel_layout, process_groups, all_process_groups, grad_sync_table, loss_scale_table
golden     read_case, write_case, case_tensor_names, tolerance (the one tolerance table)
models     map_hf_config (a Hugging Face config.json as `moe-oracle config --model` maps it)
semantics  Semantics, deviations, profiles)doc";
  m.attr("__version__") = MOE_ORACLE_VERSION;
  py::register_exception<moe::golden::CaseFormatError>(m, "CaseFormatError", PyExc_ValueError);
  py::register_exception<moe::formats::NpyError>(m, "NpyError", PyExc_ValueError);
  moe::python::bind_semantics(m);  // first: the other parts take Semantics arguments
  moe::python::bind_config(m);
  moe::python::bind_layer(m);
  moe::python::bind_step(m);
  moe::python::bind_layout(m);
  moe::python::bind_golden(m);
  moe::python::bind_model_files(m);
}
