// One MoE layer: forward and backward of the oracle (reference/moe_layer.hpp) on numpy arrays named as in the golden
// format. The arrays go through golden/'s tensor mapping and shape checks (golden/case_oracle.hpp,
// golden_case.hpp's check_tensor), the same path `moe-oracle golden verify` takes, so a dict of arrays means here
// what the same .npy files mean in a golden case.
#include "golden/case_oracle.hpp"
#include "golden/golden_case.hpp"
#include "python/src/arrays.hpp"
#include "python/src/bindings.hpp"
#include "reference/memory_estimate.hpp"
#include "reference/random_init.hpp"

#include <pybind11/stl.h>

#include <cstdint>
#include <limits>
#include <set>
#include <stdexcept>

namespace moe::python {
namespace {

// The inputs of one layer call, checked: every tensor has the shape and dtype the golden format gives it.
struct LayerCall {
  MoeConfig config;
  int seq = 0;
  int batch = 0;
  Precision precision = Precision::float64;
  golden::TensorMap tensors;  // x, input_ids (hash routing), the parameters, grad_y (backward)
  std::vector<bool> padding_mask;
  std::vector<std::vector<int>> partition;
};


// The golden input tensors that are parameters (not x, input_ids or grad_y), as the config selects them.
std::set<std::string> param_names(const MoeConfig& config) {
  std::set<std::string> names;
  for (const auto& n : golden::input_tensor_names(config))
    if (n != "x" && n != "input_ids" && n != "grad_y") names.insert(n);
  return names;
}

LayerCall prepare(const py::dict& config, const py::dict& params, py::handle x, py::handle input_ids,
                  py::handle padding_mask, py::handle partition, py::handle batch, py::handle grad_y) {
  LayerCall c;
  c.config = layer_config_from_dict(config);
  // The call runs in x's precision; a mix would silently round the float64 tensors, so it is refused.
  c.precision = precision_of(x, "x");
  const auto add_real = [&c](const std::string& name, py::handle value) {
    const Precision p = precision_of(value, name);
    if (p != c.precision)
      throw std::invalid_argument(name + " is " + std::string(to_string(p)) + " but x is " +
                                  std::string(to_string(c.precision)) +
                                  ": give every real tensor of a call the same precision");
    auto array = npy_from_numpy(value, formats::NpyDtype::f8, name);
    require_finite(array, name);
    c.tensors.emplace(name, std::move(array));
  };
  add_real("x", x);
  const auto& x_shape = c.tensors.at("x").shape;
  if (x_shape.size() != 2) throw std::invalid_argument("x must be [tokens, hidden], got shape " + shape_text(x_shape));

  if (!input_ids.is_none()) {
    if (!c.config.hash_routing)
      throw std::invalid_argument("input_ids are read by hash routing only, and hash_routing is off");
    c.tensors.emplace("input_ids", npy_from_numpy(input_ids, formats::NpyDtype::i8, "input_ids"));
  } else if (c.config.hash_routing) {
    throw std::invalid_argument("hash_routing needs input_ids [batch, seq]");
  }
  // Rows are t = s·batch + b; batch matters to seq_aux (one sequence per b) and to input_ids' shape.
  if (!batch.is_none()) {
    c.batch = int_argument(batch, "batch", 1);
  } else if (c.tensors.count("input_ids") && c.tensors.at("input_ids").shape.size() == 2) {
    c.batch = static_cast<int>(c.tensors.at("input_ids").shape[0]);
  } else {
    c.batch = 1;
  }
  if (x_shape[0] % c.batch != 0)
    throw std::invalid_argument("x has " + std::to_string(x_shape[0]) + " rows, not a multiple of batch = " +
                                std::to_string(c.batch));
  c.seq = static_cast<int>(x_shape[0] / c.batch);

  const auto names = param_names(c.config);
  for (const auto& [key, value] : params) {
    const auto name = py::str(key).cast<std::string>();
    if (!names.count(name)) {
      std::string known;
      for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
      throw std::invalid_argument("params: '" + name + "' is not a parameter of this config (expected: " + known + ")");
    }
  }
  for (const auto& name : names) {
    if (!params.contains(name)) throw std::invalid_argument("params: missing tensor '" + name + "'");
    if (name == "tid2eid") {
      c.tensors.emplace(name, npy_from_numpy(py::object(params[name.c_str()]), formats::NpyDtype::i8, name));
    } else {
      add_real(name, py::object(params[name.c_str()]));
    }
  }
  if (!grad_y.is_none()) add_real("grad_y", grad_y);

  golden::CaseHeader header;
  header.config = c.config;
  header.seq = c.seq;
  header.batch = c.batch;
  for (const auto& [name, array] : c.tensors) golden::check_tensor(header, name, array);

  if (!padding_mask.is_none()) {
    const auto mask = npy_from_numpy(padding_mask, formats::NpyDtype::b1, "padding_mask");
    if (mask.shape != std::vector<std::int64_t>{x_shape[0]})
      throw std::invalid_argument("padding_mask must be [tokens] = [" + std::to_string(x_shape[0]) + "], got " +
                                  shape_text(mask.shape));
    c.padding_mask.assign(mask.booleans.begin(), mask.booleans.end());
  }
  if (!partition.is_none()) {
    // Rows strictly as ints (a bool was row 0 or 1); their range is the layer's rule (layer_validation.cpp).
    if (!py::isinstance<py::list>(partition) && !py::isinstance<py::tuple>(partition))
      throw std::invalid_argument("partition must be a list of lists of row indices");
    for (const auto part : partition)
      c.partition.push_back(int_list_argument(part, "partition[" + std::to_string(c.partition.size()) + "]",
                                              std::numeric_limits<int>::min()));
  }
  return c;
}

template <typename T>
MoeInputs<T> layer_inputs(const LayerCall& c) {
  auto in = golden::inputs_from_tensors<T>(c.config, c.seq, c.batch, c.tensors);
  in.padding_mask = c.padding_mask;
  in.partition = c.partition;
  return in;
}

template <typename T>
py::dict forward(const LayerCall& c) {
  const auto params = golden::params_from_tensors<T>(c.config, c.tensors);
  const auto inputs = layer_inputs<T>(c);
  MoeForward<T> f;
  {
    py::gil_scoped_release unlocked;  // pure C++ from here; other Python threads may run
    f = moe_forward(c.config, params, inputs);
  }
  py::dict out;
  for (const auto& [name, array] : golden::forward_tensors(c.config, f)) out[py::str(name)] = numpy_from_npy(array, c.precision);
  const auto& r = f.routing;
  out["logits"] = numpy_from_matrix(r.logits);
  out["scores"] = numpy_from_matrix(r.scores);
  out["selected"] = numpy_from_matrix(r.selected);
  out["topk_weights"] = numpy_from_matrix(r.topk_weights);
  out["bias_counts"] = numpy_from_vector(r.bias_counts);
  return out;
}

template <typename T>
py::dict backward(const LayerCall& c) {
  const auto params = golden::params_from_tensors<T>(c.config, c.tensors);
  const auto inputs = layer_inputs<T>(c);
  const auto grad_y = golden::matrix_from_tensor<T>(c.tensors.at("grad_y"));
  MoeGradients<T> g;
  {
    py::gil_scoped_release unlocked;
    g = moe_backward(c.config, params, inputs, moe_forward(c.config, params, inputs), grad_y);
  }
  py::dict out;
  const std::string prefix = "grad_";
  for (const auto& [name, array] : golden::gradient_tensors(c.config, g))
    out[py::str(name.substr(prefix.size()))] = numpy_from_npy(array, c.precision);
  return out;
}

}  // namespace

void bind_layer(py::module_& m) {
  m.def(
      "layer_forward",
      [](const py::dict& config, const py::dict& params, const py::object& x, const py::object& input_ids,
         const py::object& padding_mask, const py::object& partition, const py::object& batch) {
        const auto c = prepare(config, params, x, input_ids, padding_mask, partition, batch, py::none());
        require_memory(layer_activation_bytes(c.config, static_cast<std::uint64_t>(c.seq) * c.batch), "layer_forward");
        return c.precision == Precision::float32 ? forward<float>(c) : forward<double>(c);
      },
      py::arg("config"), py::arg("params"), py::arg("x"), py::arg("input_ids") = py::none(),
      py::arg("padding_mask") = py::none(), py::arg("partition") = py::none(), py::arg("batch") = py::none(),
      R"doc(Forward of one MoE layer.

config        layer config dict (see ``layer_config``).
params        dict of arrays named as in a golden case (golden/README.md): router_weight [E, h], expert_fc1
              [E, 2d, w] (rows [gate; up], w = latent_size or h), expert_fc2 [E, w, d], and as the config selects:
              expert_bias [E], tid2eid [V, k] (int), shared_fc1 [2ds, h], shared_fc2 [h, ds], shared_gate [1, h],
              latent_down [latent, h], latent_up [h, latent]. A missing or extra tensor is a ValueError.
x             [T, h] with row t = s·batch + b, float64 or float32. float32 runs the oracle's float instantiation;
              every real tensor must then be float32 and the real outputs are float32.
input_ids     [batch, seq] int (hash routing only).
padding_mask  [T] bool, True = a padded token (out of the router's statistics and the bias counts).
partition     list of lists of rows: the capacity partition (one list per source rank); default one part.
batch         sequences in x (default input_ids.shape[0], else 1); only seq_aux and hash routing read it.

Returns a dict of arrays: y [T, h], probs [T, E] (after dropping), routing_map [T, E] bool (padded capacity slots
included), tokens_per_expert [E] int, and as the config selects: aux_loss [] and z_loss [] (coefficients included),
expert_bias_updated [E]. Also: logits [T, E], scores [T, E], selected [T, k] int (before dropping), topk_weights
[T, k], bias_counts [E] int (real assignments after dropping, padded tokens excluded). Shape or option errors raise
ValueError with the C++ message.)doc");

  m.def(
      "layer_backward",
      [](const py::dict& config, const py::dict& params, const py::object& x, const py::object& grad_y,
         const py::object& input_ids, const py::object& padding_mask, const py::object& partition,
         const py::object& batch) {
        const auto c = prepare(config, params, x, input_ids, padding_mask, partition, batch, grad_y);
        require_memory(layer_activation_bytes(c.config, static_cast<std::uint64_t>(c.seq) * c.batch), "layer_backward");
        return c.precision == Precision::float32 ? backward<float>(c) : backward<double>(c);
      },
      py::arg("config"), py::arg("params"), py::arg("x"), py::arg("grad_y"), py::arg("input_ids") = py::none(),
      py::arg("padding_mask") = py::none(), py::arg("partition") = py::none(), py::arg("batch") = py::none(),
      R"doc(Gradients of L = Σ⟨grad_y, y⟩ + aux_loss + z_loss for one MoE layer.

Arguments as ``layer_forward``, plus grad_y [T, h] (x's precision). Returns a dict named like the parameters (the
golden format's grad_* tensors without the prefix): x [T, h], router_weight [E, h], expert_fc1 [E, 2d, w],
expert_fc2 [E, w, d], and as the config selects shared_fc1, shared_fc2, shared_gate, latent_down, latent_up. The
expert bias (updated by counts) and tid2eid (a table) have no gradient.)doc");

  m.def(
      "random_layer_inputs",
      [](const py::dict& config, const py::object& seq_arg, const py::object& batch_arg, const py::object& seed_arg,
         const py::object& vocab_arg) {
        const int seq = int_argument(seq_arg, "seq", 1), batch = int_argument(batch_arg, "batch", 1);
        const std::uint64_t seed = seed_argument(seed_arg, "seed");
        const int vocab = int_argument(vocab_arg, "vocab", 0);  // 0 serves a layer without hash routing
        if (static_cast<std::int64_t>(seq) * batch > std::numeric_limits<int>::max())
          throw std::invalid_argument("seq × batch = " + std::to_string(static_cast<std::int64_t>(seq) * batch) +
                                      " tokens, more than 2^31 - 1");
        const MoeConfig c = layer_config_from_dict(config);
        // Twice: the C++ tensors and their numpy copies live together until the copies are made.
        require_memory(2 * std::min(layer_inputs_bytes(c, vocab, seq, batch), UINT64_MAX / 2), "random_layer_inputs");
        golden::OracleInputs in;
        in.params = random_params<double>(c, vocab, seed);
        in.inputs = random_inputs<double>(c, seq, batch, vocab, seed + 1);
        in.grad_y = random_grad_y<double>(c, seq * batch, seed + 2);
        const auto names = param_names(c);
        py::dict out, params;
        for (const auto& [name, array] : golden::input_tensors(c, in)) {
          if (names.count(name)) {
            params[py::str(name)] = numpy_from_npy(array);
          } else {
            out[py::str(name)] = numpy_from_npy(array);
          }
        }
        out["params"] = params;
        return out;
      },
      py::arg("config"), py::arg("seq"), py::arg("batch"), py::arg("seed") = 1, py::arg("vocab") = 32,
      R"doc(Seeded float64 inputs for one layer, as ``moe-oracle golden write`` draws them (seeds seed, seed+1,
seed+2): {"params": {...}, "x": [seq·batch, h], "grad_y": [seq·batch, h]} and "input_ids" [batch, seq] with hash
routing. Parameters are scaled like a trained layer (≈ 1/sqrt(fan_in)); vocab sizes tid2eid and the ids.)doc");
}

}  // namespace moe::python
