#include "reference/muon.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace moe {

Matrix<double> newton_schulz(const Matrix<double>& u) {
  const bool transpose = u.rows() > u.cols();
  Matrix<double> x = transpose ? Matrix<double>(u.transpose()) : u;
  x /= std::max(x.norm(), 1e-7);
  for (const auto& [a, b, c] : kQuinticNewtonSchulz) {
    const Matrix<double> gram = x * x.transpose();
    const Matrix<double> poly = b * gram + c * (gram * gram);
    x = (a * x + poly * x).eval();
  }
  return transpose ? Matrix<double>(x.transpose()) : x;
}

double muon_spectral_scale(Eigen::Index rows, Eigen::Index cols) {
  return std::sqrt(static_cast<double>(std::max(rows, cols)));
}

bool is_muon_matrix(const std::string& name, const std::vector<Eigen::Index>& shape) {
  return shape.size() == 2 && name != "embedding" && name != "head";
}

Matrix<double> muon_direction(const MuonConfig& muon, const Matrix<double>& m, const Matrix<double>& g) {
  const Matrix<double> u = muon.nesterov ? Matrix<double>(g + muon.momentum * (m - g)) : m;
  return muon.extra_scale * muon_spectral_scale(u.rows(), u.cols()) * newton_schulz(u);
}

void muon_step(const ModelConfig& config, const MuonConfig& muon, const AdamConfig& adam, AdamState& state,
               ModelParams<double>& params, ModelParams<double>& grads) {
  const std::vector<TensorView<double>> theta = trained_tensors(config, params);
  const std::vector<TensorView<double>> grad = trained_tensors(config, grads);
  if (theta.size() != grad.size()) throw std::invalid_argument("muon: gradients do not have the parameters' tensors");
  if (state.m.empty()) {
    for (const auto& t : theta) {
      state.m.emplace_back(static_cast<size_t>(t.size), 0.0);
      state.v.emplace_back(static_cast<size_t>(t.size), 0.0);
    }
  }
  if (state.m.size() != theta.size()) throw std::invalid_argument("muon: state does not match the model");
  state.step += 1;
  const double bias1 = 1.0 - std::pow(adam.beta1, state.step);
  const double bias2 = 1.0 - std::pow(adam.beta2, state.step);
  for (size_t i = 0; i < theta.size(); ++i) {
    if (theta[i].name != grad[i].name || theta[i].size != grad[i].size)
      throw std::invalid_argument("muon: gradient of " + theta[i].name + " has the wrong shape");
    double* p = theta[i].data;
    const double* g = grad[i].data;
    double* m = state.m[i].data();
    if (!is_muon_matrix(theta[i].name, theta[i].shape)) {  // AdamW, as adam_step
      double* v = state.v[i].data();
      for (Eigen::Index j = 0; j < theta[i].size; ++j) {
        m[j] = adam.beta1 * m[j] + (1 - adam.beta1) * g[j];
        v[j] = adam.beta2 * v[j] + (1 - adam.beta2) * g[j] * g[j];
        p[j] -= adam.lr * ((m[j] / bias1) / (std::sqrt(v[j] / bias2) + adam.eps) + adam.weight_decay * p[j]);
      }
      continue;
    }
    const Eigen::Index rows = theta[i].shape[0], cols = theta[i].shape[1];
    for (Eigen::Index j = 0; j < theta[i].size; ++j) m[j] += (1 - muon.momentum) * (g[j] - m[j]);
    const Matrix<double> direction = muon_direction(muon, Eigen::Map<const Matrix<double>>(m, rows, cols),
                                                    Eigen::Map<const Matrix<double>>(g, rows, cols));
    for (Eigen::Index j = 0; j < theta[i].size; ++j) {
      p[j] *= 1 - muon.lr * muon.weight_decay;
      p[j] -= muon.lr * direction.data()[j];
    }
  }
}

}  // namespace moe
