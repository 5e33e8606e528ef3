#include "golden/case_oracle.hpp"

#include "golden/npy_eigen.hpp"
#include "reference/random_init.hpp"

#include <algorithm>
#include <vector>

namespace moe::golden {
namespace {

const NpyArray& tensor(const GoldenCase& c, const std::string& name) { return c.tensors.at(name); }

}  // namespace

OracleInputs oracle_inputs(const GoldenCase& c) {
  const MoeConfig& config = c.header.config;
  OracleInputs in;
  in.inputs.seq = c.header.seq;
  in.inputs.batch = c.header.batch;
  in.inputs.x = to_matrix(tensor(c, "x"));
  in.params.router_weight = to_matrix(tensor(c, "router_weight"));
  in.params.expert_fc1 = to_stack(tensor(c, "expert_fc1"));
  in.params.expert_fc2 = to_stack(tensor(c, "expert_fc2"));
  if (config.hash_routing) {
    in.inputs.input_ids = to_index_matrix(tensor(c, "input_ids"));
    in.params.tid2eid = to_index_matrix(tensor(c, "tid2eid"));
  }
  if (config.expert_bias) in.params.expert_bias = to_vector(tensor(c, "expert_bias"));
  if (config.has_shared_expert()) {
    in.params.shared_fc1 = to_matrix(tensor(c, "shared_fc1"));
    in.params.shared_fc2 = to_matrix(tensor(c, "shared_fc2"));
  }
  if (config.shared_expert_gate) in.params.shared_gate = to_matrix(tensor(c, "shared_gate"));
  if (config.latent_size > 0) {
    in.params.latent_down = to_matrix(tensor(c, "latent_down"));
    in.params.latent_up = to_matrix(tensor(c, "latent_up"));
  }
  if (c.header.padding_mask) {
    const auto& mask = tensor(c, "padding_mask").booleans;
    in.inputs.padding_mask.assign(mask.begin(), mask.end());
  }
  in.grad_y = to_matrix(tensor(c, "grad_y"));
  return in;
}

std::map<std::string, NpyArray> oracle_outputs(const MoeConfig& config, const OracleInputs& in) {
  const auto fwd = moe_forward(config, in.params, in.inputs);
  const auto grads = moe_backward(config, in.params, in.inputs, fwd, in.grad_y);
  const auto& r = fwd.routing;
  std::map<std::string, NpyArray> out;
  out.emplace("y", from_matrix(fwd.y));
  out.emplace("probs", from_matrix(r.probs));
  out.emplace("routing_map", NpyArray::of_booleans({r.routing_map.rows(), r.routing_map.cols()},
                                                   {r.routing_map.data(), r.routing_map.data() + r.routing_map.size()}));
  out.emplace("tokens_per_expert", NpyArray::of_integers({static_cast<std::int64_t>(r.tokens_per_expert.size())},
                                                         r.tokens_per_expert));
  if (config.expert_bias && config.bias_update_rate) out.emplace("expert_bias_updated", from_vector(fwd.expert_bias_updated));
  if (config.aux_loss_type != AuxLossType::none) out.emplace("aux_loss", from_scalar(fwd.aux_loss));
  if (config.z_loss_coeff > 0) out.emplace("z_loss", from_scalar(fwd.z_loss));
  out.emplace("grad_x", from_matrix(grads.x));
  out.emplace("grad_router_weight", from_matrix(grads.params.router_weight));
  out.emplace("grad_expert_fc1", from_stack(grads.params.expert_fc1));
  out.emplace("grad_expert_fc2", from_stack(grads.params.expert_fc2));
  if (config.has_shared_expert()) {
    out.emplace("grad_shared_fc1", from_matrix(grads.params.shared_fc1));
    out.emplace("grad_shared_fc2", from_matrix(grads.params.shared_fc2));
  }
  if (config.shared_expert_gate) out.emplace("grad_shared_gate", from_matrix(grads.params.shared_gate));
  if (config.latent_size > 0) {
    out.emplace("grad_latent_down", from_matrix(grads.params.latent_down));
    out.emplace("grad_latent_up", from_matrix(grads.params.latent_up));
  }
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
  const auto& p = in.params;
  c.tensors.emplace("x", from_matrix(in.inputs.x));
  c.tensors.emplace("router_weight", from_matrix(p.router_weight));
  c.tensors.emplace("expert_fc1", from_stack(p.expert_fc1));
  c.tensors.emplace("expert_fc2", from_stack(p.expert_fc2));
  c.tensors.emplace("grad_y", from_matrix(in.grad_y));
  if (config.hash_routing) {
    c.tensors.emplace("input_ids", from_index_matrix(in.inputs.input_ids));
    c.tensors.emplace("tid2eid", from_index_matrix(p.tid2eid));
  }
  if (config.expert_bias) c.tensors.emplace("expert_bias", from_vector(p.expert_bias));
  if (config.has_shared_expert()) {
    c.tensors.emplace("shared_fc1", from_matrix(p.shared_fc1));
    c.tensors.emplace("shared_fc2", from_matrix(p.shared_fc2));
  }
  if (config.shared_expert_gate) c.tensors.emplace("shared_gate", from_matrix(p.shared_gate));
  if (config.latent_size > 0) {
    c.tensors.emplace("latent_down", from_matrix(p.latent_down));
    c.tensors.emplace("latent_up", from_matrix(p.latent_up));
  }
  c.tensors.merge(oracle_outputs(config, in));
  return c;
}

}  // namespace moe::golden
