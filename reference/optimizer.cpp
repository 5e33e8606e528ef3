#include "reference/optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace moe {
TrainedPairs pair_with_grads(const ModelConfig& config, ModelParams<double>& params, ModelParams<double>& grads) {
  TrainedPairs p{trained_tensors(config, params), trained_tensors(config, grads)};
  if (p.params.size() != p.grads.size())
    throw std::invalid_argument("optimizer: gradients do not have the parameters' tensors");
  for (size_t i = 0; i < p.params.size(); ++i)
    if (p.params[i].name != p.grads[i].name || p.params[i].size != p.grads[i].size)
      throw std::invalid_argument("optimizer: gradient of " + p.params[i].name + " has the wrong shape");
  return p;
}

void begin_adam_step(AdamState& state, const std::vector<TensorView<double>>& params) {
  if (state.m.empty()) {
    for (const auto& t : params) {
      state.m.emplace_back(static_cast<size_t>(t.size), 0.0);
      state.v.emplace_back(static_cast<size_t>(t.size), 0.0);
    }
  }
  if (state.m.size() != params.size()) throw std::invalid_argument("optimizer: state does not match the model");
  state.step += 1;
}

void adamw_tensor(const AdamConfig& adam, AdamState& state, size_t i, const TensorView<double>& param,
                  const TensorView<double>& grad) {
  const double bias1 = 1.0 - std::pow(adam.beta1, state.step);
  const double bias2 = 1.0 - std::pow(adam.beta2, state.step);
  for (Eigen::Index j = 0; j < param.size; ++j) {
    const double g = grad.data[j];
    double& m = state.m[i][static_cast<size_t>(j)];
    double& v = state.v[i][static_cast<size_t>(j)];
    m = adam.beta1 * m + (1 - adam.beta1) * g;
    v = adam.beta2 * v + (1 - adam.beta2) * g * g;
    double& theta = param.data[j];
    theta -= adam.lr * ((m / bias1) / (std::sqrt(v / bias2) + adam.eps) + adam.weight_decay * theta);
  }
}

double clip_coefficient(double max_norm, double norm) {
  if (!(max_norm > 0)) throw std::invalid_argument("gradient clipping: the max norm must be > 0");
  return std::min(1.0, max_norm / (norm + 1e-6));
}

GradClip clip_grad_norm(const ModelConfig& config, double max_norm, ModelParams<double>& grads) {
  GradClip clip;
  const std::vector<TensorView<double>> tensors = trained_tensors(config, grads);
  double squares = 0;
  for (const auto& t : tensors)
    for (Eigen::Index j = 0; j < t.size; ++j) squares += t.data[j] * t.data[j];
  clip.norm = std::sqrt(squares);
  clip.coefficient = clip_coefficient(max_norm, clip.norm);
  if (clip.coefficient < 1.0)
    for (const auto& t : tensors)
      for (Eigen::Index j = 0; j < t.size; ++j) t.data[j] *= clip.coefficient;
  return clip;
}

void sgd_step(const ModelConfig& config, const SgdConfig& sgd, ModelParams<double>& params,
              ModelParams<double>& grads) {
  const TrainedPairs p = pair_with_grads(config, params, grads);
  for (size_t i = 0; i < p.params.size(); ++i)
    for (Eigen::Index j = 0; j < p.params[i].size; ++j) p.params[i].data[j] -= sgd.lr * p.grads[i].data[j];
}

void adam_step(const ModelConfig& config, const AdamConfig& adam, AdamState& state, ModelParams<double>& params,
               ModelParams<double>& grads) {
  const TrainedPairs p = pair_with_grads(config, params, grads);
  begin_adam_step(state, p.params);
  for (size_t i = 0; i < p.params.size(); ++i) adamw_tensor(adam, state, i, p.params[i], p.grads[i]);
}

}  // namespace moe
