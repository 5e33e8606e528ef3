#include "golden/case_oracle.hpp"

#include "formats/npy_eigen.hpp"
#include "golden/case_files.hpp"

#include "reference/random_init.hpp"

#include <algorithm>
#include <vector>

namespace moe::golden {
namespace {

const formats::NpyArray& tensor(const TensorMap& tensors, const std::string& name) {
  const auto it = tensors.find(name);
  if (it == tensors.end()) throw CaseFormatError("missing tensor '" + name + "'");
  return it->second;
}

}  // namespace

template <typename T>
Matrix<T> matrix_from_tensor(const formats::NpyArray& array) {
  return formats::to_matrix<T>(array);
}

template <typename T>
MoeParams<T> params_from_tensors(const MoeConfig& config, const TensorMap& t) {
  MoeParams<T> p;
  p.router_weight = formats::to_matrix<T>(tensor(t, "router_weight"));
  p.expert_fc1 = formats::to_stack<T>(tensor(t, "expert_fc1"));
  p.expert_fc2 = formats::to_stack<T>(tensor(t, "expert_fc2"));
  if (config.hash_routing) p.tid2eid = formats::to_index_matrix(tensor(t, "tid2eid"));
  if (config.expert_bias) p.expert_bias = formats::to_vector<T>(tensor(t, "expert_bias"));
  if (config.has_shared_expert()) {
    p.shared_fc1 = formats::to_matrix<T>(tensor(t, "shared_fc1"));
    p.shared_fc2 = formats::to_matrix<T>(tensor(t, "shared_fc2"));
  }
  if (config.shared_expert_gate) p.shared_gate = formats::to_matrix<T>(tensor(t, "shared_gate"));
  if (config.latent_size > 0) {
    p.latent_down = formats::to_matrix<T>(tensor(t, "latent_down"));
    p.latent_up = formats::to_matrix<T>(tensor(t, "latent_up"));
  }
  return p;
}

template <typename T>
MoeInputs<T> inputs_from_tensors(const MoeConfig& config, int seq, int batch, const TensorMap& t) {
  MoeInputs<T> in;
  in.seq = seq;
  in.batch = batch;
  in.x = formats::to_matrix<T>(tensor(t, "x"));
  if (config.hash_routing) in.input_ids = formats::to_index_matrix(tensor(t, "input_ids"));
  if (const auto mask = t.find("padding_mask"); mask != t.end())  // format 2 (golden/README.md)
    in.padding_mask.assign(mask->second.booleans.begin(), mask->second.booleans.end());
  return in;
}

OracleInputs oracle_inputs(const GoldenCase& c) {
  const CaseHeader& h = c.header;
  // Before the oracle runs: a NaN weight of an expert that receives no token would reach no output.
  for (const auto& name : input_tensor_names(h)) check_finite(name, tensor(c.tensors, name));
  return {params_from_tensors<double>(h.config, c.tensors),
          inputs_from_tensors<double>(h.config, h.seq, h.batch, c.tensors),
          formats::to_matrix<double>(tensor(c.tensors, "grad_y"))};
}

TensorMap input_tensors(const MoeConfig& config, const OracleInputs& in) {
  const auto& p = in.params;
  TensorMap t;
  t.emplace("x", formats::from_matrix(in.inputs.x));
  t.emplace("router_weight", formats::from_matrix(p.router_weight));
  t.emplace("expert_fc1", formats::from_stack(p.expert_fc1));
  t.emplace("expert_fc2", formats::from_stack(p.expert_fc2));
  t.emplace("grad_y", formats::from_matrix(in.grad_y));
  if (config.hash_routing) {
    t.emplace("input_ids", formats::from_index_matrix(in.inputs.input_ids));
    t.emplace("tid2eid", formats::from_index_matrix(p.tid2eid));
  }
  if (config.expert_bias) t.emplace("expert_bias", formats::from_vector(p.expert_bias));
  if (!in.inputs.padding_mask.empty())
    t.emplace("padding_mask", formats::NpyArray::of_booleans({static_cast<std::int64_t>(in.inputs.padding_mask.size())},
                                                    {in.inputs.padding_mask.begin(), in.inputs.padding_mask.end()}));
  if (config.has_shared_expert()) {
    t.emplace("shared_fc1", formats::from_matrix(p.shared_fc1));
    t.emplace("shared_fc2", formats::from_matrix(p.shared_fc2));
  }
  if (config.shared_expert_gate) t.emplace("shared_gate", formats::from_matrix(p.shared_gate));
  if (config.latent_size > 0) {
    t.emplace("latent_down", formats::from_matrix(p.latent_down));
    t.emplace("latent_up", formats::from_matrix(p.latent_up));
  }
  return t;
}

template <typename T>
TensorMap forward_tensors(const MoeConfig& config, const MoeForward<T>& fwd) {
  const auto& r = fwd.routing;
  TensorMap out;
  out.emplace("y", formats::from_matrix(fwd.y));
  out.emplace("probs", formats::from_matrix(r.probs));
  out.emplace("routing_map",
              formats::NpyArray::of_booleans({r.routing_map.rows(), r.routing_map.cols()},
                                             {r.routing_map.data(), r.routing_map.data() + r.routing_map.size()}));
  out.emplace("tokens_per_expert", formats::NpyArray::of_integers(
                                       {static_cast<std::int64_t>(r.tokens_per_expert.size())}, r.tokens_per_expert));
  if (config.expert_bias && config.bias_update_rate) out.emplace("expert_bias_updated", formats::from_vector(fwd.expert_bias_updated));
  if (config.aux_loss_type != AuxLossType::none) out.emplace("aux_loss", formats::from_scalar(fwd.aux_loss));
  if (config.z_loss_coeff > 0) out.emplace("z_loss", formats::from_scalar(fwd.z_loss));
  return out;
}

template <typename T>
TensorMap gradient_tensors(const MoeConfig& config, const MoeGradients<T>& grads) {
  TensorMap out;
  out.emplace("grad_x", formats::from_matrix(grads.x));
  out.emplace("grad_router_weight", formats::from_matrix(grads.params.router_weight));
  out.emplace("grad_expert_fc1", formats::from_stack(grads.params.expert_fc1));
  out.emplace("grad_expert_fc2", formats::from_stack(grads.params.expert_fc2));
  if (config.has_shared_expert()) {
    out.emplace("grad_shared_fc1", formats::from_matrix(grads.params.shared_fc1));
    out.emplace("grad_shared_fc2", formats::from_matrix(grads.params.shared_fc2));
  }
  if (config.shared_expert_gate) out.emplace("grad_shared_gate", formats::from_matrix(grads.params.shared_gate));
  if (config.latent_size > 0) {
    out.emplace("grad_latent_down", formats::from_matrix(grads.params.latent_down));
    out.emplace("grad_latent_up", formats::from_matrix(grads.params.latent_up));
  }
  return out;
}

TensorMap oracle_outputs(const MoeConfig& config, const OracleInputs& in, ExpertPath path) {
  const auto fwd = moe_forward(config, in.params, in.inputs, path);
  TensorMap out = forward_tensors(config, fwd);
  out.merge(gradient_tensors(config, moe_backward(config, in.params, in.inputs, fwd, in.grad_y, {}, path)));
  return out;
}

GoldenCase oracle_case(const MoeConfig& config, int seq, int batch, int vocab, std::uint64_t seed,
                       const Tolerance& tolerance, const std::string& description) {
  config.validate();
  OracleInputs in;
  in.params = random_params<double>(config, vocab, seed);
  in.inputs = random_inputs<double>(config, seq, batch, vocab, seed + 1);
  in.grad_y = random_grad_y<double>(config, seq * batch, seed + 2);

  GoldenCase c;
  c.header = {description, config, seq, batch, tolerance};
  c.tensors = input_tensors(config, in);
  c.tensors.merge(oracle_outputs(config, in));
  return c;
}

template MoeParams<double> params_from_tensors<double>(const MoeConfig&, const TensorMap&);
template MoeParams<float> params_from_tensors<float>(const MoeConfig&, const TensorMap&);
template MoeInputs<double> inputs_from_tensors<double>(const MoeConfig&, int, int, const TensorMap&);
template MoeInputs<float> inputs_from_tensors<float>(const MoeConfig&, int, int, const TensorMap&);
template Matrix<double> matrix_from_tensor<double>(const formats::NpyArray&);
template Matrix<float> matrix_from_tensor<float>(const formats::NpyArray&);
template TensorMap forward_tensors<double>(const MoeConfig&, const MoeForward<double>&);
template TensorMap forward_tensors<float>(const MoeConfig&, const MoeForward<float>&);
template TensorMap gradient_tensors<double>(const MoeConfig&, const MoeGradients<double>&);
template TensorMap gradient_tensors<float>(const MoeConfig&, const MoeGradients<float>&);

}  // namespace moe::golden
