#include "reference/muon.hpp"

#include <algorithm>
#include <cmath>

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
  const TrainedPairs p = pair_with_grads(config, params, grads);
  begin_adam_step(state, p.params);
  for (size_t i = 0; i < p.params.size(); ++i) {
    const TensorView<double>& theta = p.params[i];
    if (!is_muon_matrix(theta.name, theta.shape)) {
      adamw_tensor(adam, state, i, theta, p.grads[i]);
      continue;
    }
    const double* g = p.grads[i].data;
    double* m = state.m[i].data();
    const Eigen::Index rows = theta.shape[0], cols = theta.shape[1];
    for (Eigen::Index j = 0; j < theta.size; ++j) m[j] += (1 - muon.momentum) * (g[j] - m[j]);
    const Matrix<double> direction = muon_direction(muon, Eigen::Map<const Matrix<double>>(m, rows, cols),
                                                    Eigen::Map<const Matrix<double>>(g, rows, cols));
    for (Eigen::Index j = 0; j < theta.size; ++j) {
      theta.data[j] *= 1 - muon.lr * muon.weight_decay;
      theta.data[j] -= muon.lr * direction.data()[j];
    }
  }
}

}  // namespace moe
