// Semantics: the named deviations of pinned Megatron versions from the intended objective (reference/semantics.hpp),
// their profiles, and spec strings ("megatron-core-0.19,-ce-per-cp-rank") parsed and validated by the C++ parser.
#include "python/src/bindings.hpp"
#include "reference/semantics.hpp"

#include <pybind11/stl.h>

#include <string>
#include <vector>

namespace moe::python {
namespace {

std::vector<std::string> names(const std::vector<Deviation>& deviations) {
  std::vector<std::string> out;
  for (Deviation d : deviations) out.emplace_back(deviation_info(d).name);
  return out;
}

py::dict deviation_dict(const DeviationInfo& d) {
  py::dict out;
  out["name"] = std::string(d.name);
  out["kind"] = std::string(to_string(d.kind));
  out["statement"] = std::string(d.statement);
  out["intended"] = std::string(d.intended);
  out["megatron"] = std::string(d.megatron);
  out["upstream"] = std::string(d.upstream);
  out["visible"] = std::string(d.visible);
  out["mean_modes"] = d.mean_modes;
  out["per_token_mode"] = d.per_token_mode;
  out["tp_cp_dependent"] = d.tp_cp_dependent;
  return out;
}

}  // namespace

void bind_semantics(py::module_& m) {
  py::class_<Semantics>(m, "Semantics", R"doc(Which Megatron deviations from the intended objective are on.

``Semantics(spec)`` parses a spec: a profile name (``intended``, ``megatron-core-0.19``, ``megatron-main``),
optionally followed by ``,+deviation`` / ``,-deviation`` to turn single deviations on or off. An unknown profile or
deviation raises ValueError listing the known names. Every function taking ``semantics`` accepts a spec string or a
Semantics.)doc")
      .def(py::init([](const std::string& spec) { return Semantics::parse(spec); }), py::arg("spec") = "intended")
      .def_property_readonly("spec", &Semantics::spec, "The canonical spec: Semantics(s.spec) == s.")
      .def_property_readonly(
          "deviations", [](const Semantics& s) { return names(s.deviations()); }, "The names of the deviations on.")
      .def_property_readonly("intended", &Semantics::intended, "True when every deviation is off.")
      .def(
          "has", [](const Semantics& s, const std::string& name) { return s.has(parse_deviation(name)); },
          py::arg("deviation"), "Whether the named deviation is on.")
      .def(
          "with_deviation",
          [](const Semantics& s, const std::string& name, bool on) { return s.with(parse_deviation(name), on); },
          py::arg("deviation"), py::arg("on"), "A copy with the named deviation turned on or off.")
      .def(
          "in_mode", [](const Semantics& s, const std::string& mode) { return s.in_mode(parse_loss_mode(mode)); },
          py::arg("mode"), "The deviations that take effect under a loss mode (sum, avg, per-token).")
      .def("__eq__", [](const Semantics& a, const Semantics& b) { return a == b; })
      .def("__repr__", [](const Semantics& s) { return "Semantics('" + s.spec() + "')"; });
  py::implicitly_convertible<py::str, Semantics>();

  m.def(
      "deviations",
      [] {
        py::list out;
        for (const auto& d : deviation_catalogue()) out.append(deviation_dict(d));
        return out;
      },
      R"doc(The catalogue of deviations, one dict each: name, kind (modelled, replayed, scaling, refused, mapped), statement
(what Megatron computes), intended (what the intended objective computes), megatron (file: function), upstream
(issue / PR), visible (which layouts and options show it), mean_modes / per_token_mode (in effect under sum/avg,
under per-token), tp_cp_dependent.)doc");

  m.def(
      "profiles",
      [] {
        py::list out;
        for (const auto& p : semantics_profiles()) {
          py::dict d;
          d["name"] = std::string(p.name);
          d["pinned"] = std::string(p.pinned);
          d["description"] = std::string(p.description);
          d["deviations"] = names(p.deviations);
          out.append(d);
        }
        return out;
      },
      "The semantics profiles, one dict each: name, pinned (the version it encodes), description, deviations.");
}

}  // namespace moe::python
