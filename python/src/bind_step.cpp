// The global step oracle (reference/global_step.hpp): the objective J of one training step over a parallel layout,
// its terms, the per-token CE weights and dJ/dθ, with model parameters as a dict of arrays. Names are those of
// reference's trained_tensors ("embedding", "layer0.block_norm", "layer1.expert_fc1[3]", …, "head") plus each
// layer's "layerL.expert_bias" (bias-balanced layers) and "layerL.tid2eid" (hash layers), so that a gradient dict
// has the keys of the parameters it belongs to.
#include "python/src/arrays.hpp"
#include "python/src/bindings.hpp"
#include "reference/global_step.hpp"
#include "reference/memory_estimate.hpp"

#include <pybind11/stl.h>

#include <cstdint>
#include <limits>
#include <set>
#include <stdexcept>

namespace moe::python {
namespace {

std::string layer_name(int l, const char* tensor) { return "layer" + std::to_string(l) + "." + tensor; }

// The model's tensors outside trained_tensors: expert_bias and tid2eid of the layers that have them.
template <typename F>
void for_each_table(const ModelConfig& config, ModelParams<double>& p, F visit) {
  for (int l = 0; l < config.num_layers; ++l) {
    const MoeConfig lc = config.layer_config(l);
    MoeParams<double>& layer = p.layers[static_cast<size_t>(l)];
    if (lc.expert_bias) visit(layer_name(l, "expert_bias"), layer.expert_bias);
    if (lc.hash_routing) visit(layer_name(l, "tid2eid"), layer.tid2eid);
  }
}

std::vector<std::int64_t> shape_of(const TensorView<double>& v) { return {v.shape.begin(), v.shape.end()}; }

py::dict model_params_to_dict(const ModelConfig& config, ModelParams<double> p) {
  py::dict out;
  for (const auto& v : trained_tensors(config, p)) {
    const std::vector<py::ssize_t> shape(v.shape.begin(), v.shape.end());
    out[py::str(v.name)] = numpy_copy(v.data, shape);
  }
  for_each_table(config, p, [&out](const std::string& name, const auto& m) {
    if constexpr (std::remove_reference_t<decltype(m)>::ColsAtCompileTime == 1) {
      out[py::str(name)] = numpy_from_vector(m);
    } else {
      out[py::str(name)] = numpy_from_matrix(m);
    }
  });
  return out;
}

// Float32 arrays are widened to float64: the global step exists in double only.
ModelParams<double> model_params_from_dict(const ModelConfig& config, const py::dict& d) {
  // The shapes come from the model itself: a seeded model of this config, every value then overwritten.
  ModelParams<double> p = random_model_params<double>(config, 0);
  std::set<std::string> names;
  const auto take = [&](const std::string& name, formats::NpyDtype dtype, const std::vector<std::int64_t>& shape) {
    names.insert(name);
    if (!d.contains(name)) throw std::invalid_argument("params: missing tensor '" + name + "'");
    auto a = npy_from_numpy(py::object(d[name.c_str()]), dtype, name);
    if (a.shape != shape)
      throw std::invalid_argument("params: tensor '" + name + "' has shape " + shape_text(a.shape) + ", expected " +
                                  shape_text(shape));
    return a;
  };
  for (const auto& v : trained_tensors(config, p)) {
    const auto a = take(v.name, formats::NpyDtype::f8, shape_of(v));
    require_finite(a, "params['" + v.name + "']");
    std::copy(a.reals.begin(), a.reals.end(), v.data);
  }
  for_each_table(config, p, [&](const std::string& name, auto& m) {
    using M = std::remove_reference_t<decltype(m)>;
    if constexpr (M::ColsAtCompileTime == 1) {
      const auto a = take(name, formats::NpyDtype::f8, {m.size()});
      require_finite(a, "params['" + name + "']");
      std::copy(a.reals.begin(), a.reals.end(), m.data());
    } else {
      const auto a = take(name, formats::NpyDtype::i8, {m.rows(), m.cols()});
      std::copy(a.integers.begin(), a.integers.end(), m.data());
    }
  });
  for (const auto& [key, value] : d) {
    const auto name = py::str(key).cast<std::string>();
    if (!names.count(name)) throw std::invalid_argument("params: '" + name + "' is not a tensor of this model");
  }
  return p;
}

py::dict batch_to_dict(const GlobalBatch& b) {
  py::dict out;
  out["input_ids"] = numpy_from_matrix(b.input_ids);
  out["labels"] = numpy_from_matrix(b.labels);
  out["loss_mask"] = numpy_from_matrix(b.loss_mask);
  return out;
}

GlobalBatch batch_from_dict(const py::dict& d) {
  for (const auto& [key, value] : d) {
    const auto name = py::str(key).cast<std::string>();
    if (name != "input_ids" && name != "labels" && name != "loss_mask")
      throw std::invalid_argument("batch: unknown key '" + name + "' (known: input_ids, labels, loss_mask)");
  }
  const auto get = [&d](const char* name, formats::NpyDtype dtype) {
    if (!d.contains(name)) throw std::invalid_argument(std::string("batch: missing '") + name + "'");
    auto a = npy_from_numpy(py::object(d[name]), dtype, name);
    if (a.shape.size() != 2) throw std::invalid_argument(std::string("batch: ") + name + " must be [B, S]");
    return a;
  };
  const auto ids = get("input_ids", formats::NpyDtype::i8), labels = get("labels", formats::NpyDtype::i8),
             mask = get("loss_mask", formats::NpyDtype::b1);
  if (labels.shape != ids.shape || mask.shape != ids.shape)
    throw std::invalid_argument("batch: input_ids " + shape_text(ids.shape) + ", labels " + shape_text(labels.shape) +
                                " and loss_mask " + shape_text(mask.shape) + " must have the same shape [B, S]");
  GlobalBatch b;
  b.size = static_cast<int>(ids.shape[0]);
  b.seq = static_cast<int>(ids.shape[1]);
  b.input_ids = Eigen::Map<const IndexMatrix>(ids.integers.data(), b.size, b.seq);
  b.labels = Eigen::Map<const IndexMatrix>(labels.integers.data(), b.size, b.seq);
  b.loss_mask.resize(b.size, b.seq);
  std::transform(mask.booleans.begin(), mask.booleans.end(), b.loss_mask.data(), [](std::uint8_t v) { return v != 0; });
  return b;
}

py::dict step_to_dict(const ModelConfig& config, GlobalStep s) {
  py::dict out;
  out["objective"] = s.objective;
  out["ce_term"] = s.ce_term;
  out["aux_term"] = s.aux_term;
  out["z_term"] = s.z_term;
  out["valid_tokens"] = s.valid_tokens;
  out["num_microbatches"] = s.num_microbatches;
  out["ce_weights"] = numpy_from_matrix(s.ce_weights);
  py::dict grads;
  for (const auto& v : trained_tensors(config, s.grads)) {
    const std::vector<py::ssize_t> shape(v.shape.begin(), v.shape.end());
    grads[py::str(v.name)] = numpy_copy(v.data, shape);
  }
  out["grads"] = grads;
  // Every layer has its counts, with E entries each.
  IndexMatrix counts(config.num_layers, config.layer.num_experts);
  for (int l = 0; l < config.num_layers; ++l)
    for (int e = 0; e < config.layer.num_experts; ++e)
      counts(l, e) = s.bias_counts[static_cast<size_t>(l)][static_cast<size_t>(e)];
  out["bias_counts"] = numpy_from_matrix(counts);
  py::dict updated;
  for (size_t l = 0; l < s.expert_bias_updated.size(); ++l)
    if (s.expert_bias_updated[l].size() > 0)
      updated[py::str(layer_name(static_cast<int>(l), "expert_bias"))] = numpy_from_vector(s.expert_bias_updated[l]);
  out["expert_bias_updated"] = updated;
  py::list global_aux;
  for (const auto& g : s.global_aux) {
    py::dict state;
    state["tokens_per_expert_sum"] = numpy_from_vector(g.tokens_per_expert_sum);
    state["steps"] = g.steps;
    global_aux.append(state);
  }
  out["global_aux"] = global_aux;
  return out;
}

}  // namespace

void bind_step(py::module_& m) {
  m.def(
      "random_model_params",
      [](const py::dict& model_config, const py::object& seed_arg) {
        const std::uint64_t seed = seed_argument(seed_arg, "seed");
        const ModelConfig c = model_config_from_dict(model_config);
        // Twice the parameters: the C++ model and its numpy copy live together until the copy is done.
        require_memory(2 * std::min(model_param_bytes(c), UINT64_MAX / 2), "random_model_params");
        return model_params_to_dict(c, random_model_params<double>(c, seed));
      },
      py::arg("model_config"), py::arg("seed") = 1,
      R"doc(Seeded float64 parameters of a model (see ``model_config``), as the dict ``global_step`` takes:
"embedding" [V, h], per layer L "layerL.block_norm" [h], "layerL.router_weight" [E, h], "layerL.expert_fc1[e]"
[2d, w] and "layerL.expert_fc2[e]" [w, d] per expert e, "layerL.shared_fc1", "layerL.shared_fc2", … as the layer
config selects, "layerL.expert_bias" [E] (bias-balanced layers), "layerL.tid2eid" [V, k] int (hash layers), then
"final_norm" [h] and "head" [V, h].)doc");

  m.def(
      "random_global_batch",
      [](const py::dict& model_config, const py::object& seq_arg, const py::object& size_arg, const py::object& seed_arg,
         const py::object& padded_arg) {
        const int seq = int_argument(seq_arg, "seq", 1), size = int_argument(size_arg, "size", 1);
        const std::uint64_t seed = seed_argument(seed_arg, "seed");
        // Entries as ints (no bools); their range against seq is check_padding's.
        const std::vector<int> padded = int_list_argument(padded_arg, "padded", std::numeric_limits<int>::min());
        if (static_cast<std::int64_t>(seq) * size > std::numeric_limits<int>::max())
          throw std::invalid_argument("seq × size = " + std::to_string(static_cast<std::int64_t>(seq) * size) +
                                      " tokens, more than 2^31 - 1");
        const ModelConfig c = model_config_from_dict(model_config);
        check_padding(seq, size, padded);
        require_memory(2 * std::min(global_batch_bytes(seq, size), UINT64_MAX / 2), "random_global_batch");  // C++ and numpy
        return batch_to_dict(random_global_batch(c, seq, size, seed, padded));
      },
      py::arg("model_config"), py::arg("seq"), py::arg("size"), py::arg("seed") = 1,
      py::arg("padded") = py::list(),
      R"doc(A seeded global batch: {"input_ids": [B, S] int, "labels": [B, S] int, "loss_mask": [B, S] bool}, ids
and labels uniform in [0, vocab). ``padded[b]`` (one entry per sequence, or empty) pads the last positions of
sequence b (loss_mask False).)doc");

  m.def(
      "global_step",
      [](const py::dict& model_config, const py::dict& params, const py::dict& batch, const py::dict& layout,
         const py::object& micro_batch_arg, const std::string& mode) {
        const int micro_batch = int_argument(micro_batch_arg, "micro_batch", 1);
        const ModelConfig c = model_config_from_dict(model_config);
        const GlobalBatch b = batch_from_dict(batch);
        // Before the parameters are read (model_params_from_dict allocates a model of this config).
        require_memory(global_step_bytes(c, b.seq, b.size), "global_step");
        const ModelParams<double> p = model_params_from_dict(c, params);
        const ParallelLayout l = layout_from_dict(layout);
        const LossMode loss_mode = parse_loss_mode(mode);
        GlobalStep s;
        {
          py::gil_scoped_release unlocked;
          s = global_step(c, p, b, l, micro_batch, loss_mode);
        }
        return step_to_dict(c, std::move(s));
      },
      py::arg("model_config"), py::arg("params"), py::arg("batch"), py::arg("layout"), py::arg("micro_batch") = 1,
      py::arg("mode") = "sum",
      R"doc(The global step oracle: what one training step of the whole parallel system computes.

model_config  see ``model_config``; its layer's "semantics" selects the profile (intended by default).
params        dict as ``random_model_params`` gives it. The global step exists in float64 only: float32 arrays
              are widened to float64 (exactly) and every result is float64.
batch         {"input_ids", "labels", "loss_mask"} of shape [B, S] (see ``random_global_batch``).
layout        parallel layout dict (see ``parallel_layout``); micro_batch b sequences per microbatch.
mode          "sum", "avg" or "per-token" (Megatron's loss modes).

Returns {"objective", "ce_term", "aux_term", "z_term", "valid_tokens", "num_microbatches",
"ce_weights" [B, S] (each token's CE weight in J; 0 on padding), "grads" (dJ/dθ by the names of the trained
tensors of ``params``), "bias_counts" [L, E] int (real assignments over the global batch),
"expert_bias_updated" {"layerL.expert_bias": [E]} (layers with a bias update), "global_aux" (per layer, global_aux
only: {"tokens_per_expert_sum", "steps"})}.)doc");
}

}  // namespace moe::python
