// Reference optimizers over every trained tensor of the model (trained_tensors order), in plain loops.
//   SGD:   θ ← θ − lr·g
//   AdamW: m ← β1·m + (1−β1)·g;  v ← β2·v + (1−β2)·g²;  m̂ = m/(1−β1ᵗ);  v̂ = v/(1−β2ᵗ)
//          θ ← θ − lr·(m̂/(√v̂ + ε) + wd·θ)                  (decoupled weight decay, torch.optim.AdamW)
// Gradient clipping (before either): with max_norm > 0, the global L2 norm ‖g‖ of every trained gradient, then
//   c = max_norm / (‖g‖ + 1e-6);  g ← c·g when c < 1          (Megatron's clip_grad_by_total_norm_fp32)
// The expert bias is not among the trained tensors: it moves by the count rule (expert_bias.hpp).
#pragma once

#include "reference/model.hpp"

#include <vector>

namespace moe {

struct SgdConfig {
  double lr = 1e-2;
};

struct AdamConfig {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.0;
};

// Moments of every trained tensor, flattened in trained_tensors order.
struct AdamState {
  std::vector<std::vector<double>> m;
  std::vector<std::vector<double>> v;
  int step = 0;
};

// `grads` must have the shapes of `params` (as model_backward returns them).
void sgd_step(const ModelConfig& config, const SgdConfig& sgd, ModelParams<double>& params,
              ModelParams<double>& grads);
// What clipping found: the norm before clipping and the factor applied (1 when not clipped).
struct GradClip {
  double norm = 0;
  double coefficient = 1;
};
// The clip coefficient of a global norm; shared with the parallel system so both clip at the same point.
double clip_coefficient(double max_norm, double norm);
GradClip clip_grad_norm(const ModelConfig& config, double max_norm, ModelParams<double>& grads);

void adam_step(const ModelConfig& config, const AdamConfig& adam, AdamState& state, ModelParams<double>& params,
               ModelParams<double>& grads);

// The pieces adam_step is made of, for optimizers that run AdamW on part of the model (muon.hpp):
// every trained tensor with its gradient (throws when the two models' tensors differ);
struct TrainedPairs {
  std::vector<TensorView<double>> params, grads;
};
TrainedPairs pair_with_grads(const ModelConfig& config, ModelParams<double>& params, ModelParams<double>& grads);
// zero moments for every tensor of a fresh state (throws when a state does not match), and the step counted;
void begin_adam_step(AdamState& state, const std::vector<TensorView<double>>& params);
// AdamW on tensor i, with the bias corrections of state.step.
void adamw_tensor(const AdamConfig& adam, AdamState& state, size_t i, const TensorView<double>& param,
                  const TensorView<double>& grad);

}  // namespace moe
