// Shared helpers of the layer-oracle tests: small configs, the scalar layer loss, and parameter visiting.
#pragma once

#include "reference/moe_layer.hpp"
#include "reference/random_init.hpp"

#include <functional>
#include <string>
#include <vector>

namespace moe::test {

// A small valid config: h 6, E 6, k 2, d 4, sigmoid. Tests switch options on from here.
inline MoeConfig small_config() {
  MoeConfig c;
  c.hidden = 6;
  c.num_experts = 6;
  c.topk = 2;
  c.ffn_hidden = 4;
  c.score_function = ScoreFunction::sigmoid;
  return c;
}

struct LayerCase {
  MoeConfig config;
  MoeParams<double> params;
  MoeInputs<double> inputs;
  Matrix<double> grad_y;
  LossScales scales;
};

inline LayerCase make_case(const MoeConfig& config, int seq, int batch, std::uint64_t seed, int vocab = 16) {
  LayerCase c{config, random_params<double>(config, vocab, seed), random_inputs<double>(config, seq, batch, vocab, seed + 1),
              random_grad_y<double>(config, seq * batch, seed + 2), {}};
  return c;
}

// L = Σ⟨grad_y, y⟩ + scales.aux·aux + scales.z·z, the scalar the backward differentiates.
inline double layer_loss(const LayerCase& c, const MoeForward<double>& f) {
  return (c.grad_y.array() * f.y.array()).sum() + c.scales.aux * f.aux_loss + c.scales.z * f.z_loss;
}

// Calls visit(name, value, gradient) for x and every parameter tensor the config uses, pairing each with its
// gradient from `grads`.
using TensorVisitor = std::function<void(const std::string&, Matrix<double>&, const Matrix<double>&)>;

inline void for_each_tensor(LayerCase& c, const MoeGradients<double>& g, const TensorVisitor& visit) {
  visit("x", c.inputs.x, g.x);
  visit("router_weight", c.params.router_weight, g.params.router_weight);
  for (size_t e = 0; e < c.params.expert_fc1.size(); ++e) {
    visit("expert_fc1[" + std::to_string(e) + "]", c.params.expert_fc1[e], g.params.expert_fc1[e]);
    visit("expert_fc2[" + std::to_string(e) + "]", c.params.expert_fc2[e], g.params.expert_fc2[e]);
  }
  if (c.config.has_shared_expert()) {
    visit("shared_fc1", c.params.shared_fc1, g.params.shared_fc1);
    visit("shared_fc2", c.params.shared_fc2, g.params.shared_fc2);
  }
  if (c.config.shared_expert_gate) visit("shared_gate", c.params.shared_gate, g.params.shared_gate);
  if (c.config.latent_size > 0) {
    visit("latent_down", c.params.latent_down, g.params.latent_down);
    visit("latent_up", c.params.latent_up, g.params.latent_up);
  }
}

}  // namespace moe::test
