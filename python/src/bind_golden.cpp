// Golden cases (golden/README.md, docs/golden-format.md) from Python: read and write through golden/golden_case.hpp,
// so a case written here is checked exactly as `moe-oracle golden write` checks one (the fixed tensor set, dtypes and
// shapes).
#include "golden/case_json.hpp"
#include "golden/golden_case.hpp"
#include "python/src/arrays.hpp"
#include "python/src/bindings.hpp"
#include "reference/tolerance.hpp"

#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <filesystem>

namespace moe::python {

void bind_golden(py::module_& m) {
  m.def(
      "read_case",
      [](const std::filesystem::path& directory) {
        const golden::GoldenCase c = golden::read_case(directory);
        py::dict tensors;
        for (const auto& [name, array] : c.tensors) tensors[py::str(name)] = numpy_from_npy(array);
        return py::make_tuple(python_from_json(golden::case_header_to_json(c.header)), tensors);
      },
      py::arg("path"),
      R"doc(Read a golden case directory: (header, tensors).

header   the case.json content as a dict: {"format", "description", "config" (a layer config dict), "shape":
         {"seq", "batch"}, "tolerance": {"rtol", "atol"}}, every config key present.
tensors  {name: array} with the case's fixed tensor set: float64, int64 (input_ids, tid2eid, tokens_per_expert) and
         bool (routing_map) arrays.
A malformed case (unknown key, missing or extra tensor, wrong dtype or shape, another format version) raises
CaseFormatError (a ValueError) naming the problem.)doc");

  m.def(
      "write_case",
      [](const std::filesystem::path& directory, const py::dict& header, const py::dict& tensors) {
        nlohmann::json root = json_from_python(header, "header");
        if (root.is_object() && !root.contains("format")) root["format"] = std::string(golden::kCaseFormat);
        golden::GoldenCase c;
        c.header = golden::case_header_from_json(root, "header");
        for (const auto& [key, value] : tensors) {
          const auto name = py::str(key).cast<std::string>();
          c.tensors.emplace(name, npy_from_numpy(value, npy_dtype_of(value, name), name));
        }
        golden::write_case(directory, c);
      },
      py::arg("path"), py::arg("header"), py::arg("tensors"),
      R"doc(Write a golden case directory (created if needed; a folder holding anything but a case is refused).

header   as ``read_case`` returns it ("format" may be left out; the config has no "semantics": a golden case is the
         intended objective).
tensors  exactly the case's tensor set (``case_tensor_names``): float arrays are written as <f8, integer arrays as
         <i8, bool arrays as |b1; a missing or extra tensor, or a wrong dtype or shape, raises CaseFormatError.)doc");

  m.def(
      "case_tensor_names",
      [](const py::dict& config) {
        const MoeConfig c = layer_config_from_dict(config);
        py::dict out;
        out["inputs"] = golden::input_tensor_names(c);
        out["outputs"] = golden::output_tensor_names(c);
        return out;
      },
      py::arg("config"),
      R"doc(The tensors a golden case of this layer config holds: {"inputs": [...], "outputs": [...]}. The outputs are
layer_forward's golden outputs and layer_backward's gradients with a "grad_" prefix.)doc");

  m.def(
      "tolerance",
      [](const std::string& compared, const std::string& precision) {
        const Tolerance t = moe::tolerance(parse_compared(compared), parse_precision(precision));
        py::dict out;
        out["atol"] = t.atol;
        out["rtol"] = t.rtol;
        return out;
      },
      py::arg("compared"), py::arg("precision") = "float64",
      R"doc(The repository's one tolerance table (reference/tolerance.hpp): {"atol": a, "rtol": r} for a comparison
("training_step", "layer", "golden_case", "foreign_dump", "device_kernel", "token_movement", "finite_difference")
computed in a precision ("float64", "float32", "bfloat16"). A value passes when |got - want| <= a + r·|want|; use it
as np.testing.assert_allclose(got, want, **tolerance(...)). A pair the table lacks raises ValueError.)doc");
}

}  // namespace moe::python
