// RMSNorm of one row: y = x / sqrt(mean(x²) + eps) ⊙ w, and its backward.
#pragma once

#include "reference/tensor.hpp"

#include <cmath>

namespace moe {

template <typename T>
RowVector<T> rms_norm(const RowVector<T>& x, const Vector<T>& w, double eps) {
  const T r = T(1) / std::sqrt(x.squaredNorm() / static_cast<T>(x.size()) + static_cast<T>(eps));
  return (x * r).cwiseProduct(w.transpose());
}

// With x̂ = x·r: dw += dy ⊙ x̂; dx = r·(dx̂ − x̂·mean(dx̂ ⊙ x̂)), dx̂ = dy ⊙ w.
template <typename T>
RowVector<T> rms_norm_backward(const RowVector<T>& x, const Vector<T>& w, double eps, const RowVector<T>& grad_y,
                               Vector<T>& grad_w) {
  const T n = static_cast<T>(x.size());
  const T r = T(1) / std::sqrt(x.squaredNorm() / n + static_cast<T>(eps));
  const RowVector<T> x_hat = x * r;
  grad_w += grad_y.cwiseProduct(x_hat).transpose();
  const RowVector<T> grad_x_hat = grad_y.cwiseProduct(w.transpose());
  return r * (grad_x_hat - x_hat * (grad_x_hat.dot(x_hat) / n));
}

}  // namespace moe
