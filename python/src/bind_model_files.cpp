// A Hugging Face config.json mapped onto the oracle's layer from Python, by the library behind `moe-oracle config
// --model` (model_files/): the capture of a live transformers block (python/moe_capture_hf.py) gets the dump's config
// here, in process, and it is the one the command line would give for the same config.
#include "model_files/layer_config_answer.hpp"
#include "model_files/model_file.hpp"
#include "python/src/arrays.hpp"
#include "python/src/bindings.hpp"

#include <string>

namespace moe::python {
namespace {

// A spec string parsed here rather than by pybind11's implicit conversion to Semantics, which would turn the
// parser's message (the known profiles) into "incompatible function arguments".
Semantics semantics_argument(const py::object& semantics) {
  if (py::isinstance<py::str>(semantics)) return Semantics::parse(semantics.cast<std::string>());
  return cast_argument<Semantics>(semantics, "semantics", "a spec string or a Semantics");
}

}  // namespace

void bind_model_files(py::module_& m) {
  m.def(
      "map_hf_config",
      [](const py::object& config, const py::object& semantics_arg, const std::string& name) {
        const Semantics semantics = semantics_argument(semantics_arg);
        model_files::ModelFile file;
        if (py::isinstance<py::dict>(config))
          file = model_files::read_hf_config(json_from_python(config, "config"), name, semantics);
        else if (py::isinstance<py::str>(config))
          file = model_files::read_hf_config_text(config.cast<std::string>(), name, semantics);
        else
          throw std::invalid_argument("config must be a dict or the text of a config.json, got " +
                                      std::string(py::str(config.get_type().attr("__name__"))));
        const auto answer = model_files::layer_config_answer(file.model, model_files::model_source(name, file),
                                                             semantics, model_files::mapping_notes(file));
        return python_from_json(answer);
      },
      py::arg("config"), py::arg("semantics") = "intended", py::arg("name") = "config.json",
      R"doc(Map a Hugging Face config.json onto the oracle's MoE layer: what ``moe-oracle config --model FILE
--semantics S --json`` prints for a file holding it, as a dict.

config     the config as a dict (json.load of the file, or a transformers config's to_dict()) or as JSON text;
           its "model_type" is deepseek_v2, deepseek_v3, deepseek_v4, mixtral, qwen2_moe or qwen3_moe
semantics  a spec string or a Semantics; its mapped deviations change how the config is read
name       what the config is called: the "model" entry and the errors name it as the command names the file

Returns {"moe_oracle", "model", "semantics", "config" (the golden config keys of the token-routed MoE layers),
"hash_layer_config" (DeepSeek-V4's hash layers, else None), "num_layers", "n_hash_layers", "notes" (each assumption
and each key with no effect on the layer)}. A config the oracle does not model raises ValueError with the command's
one-line message.)doc");
}

}  // namespace moe::python
