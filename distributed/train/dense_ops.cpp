#include "distributed/train/dense_ops.hpp"

#include <cmath>

namespace moe::dist {
namespace {
template <typename T>
using Array = Eigen::Array<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
}

template <typename T>
Matrix<T> rms_norm_rows(const Matrix<T>& x, const Vector<T>& w, double eps) {
  const Vector<T> r =
      ((x.array().square().rowwise().sum() / static_cast<T>(x.cols())) + static_cast<T>(eps)).rsqrt();
  return ((x.array().colwise() * r.array()).rowwise() * w.transpose().array()).matrix();
}

// dx = r·(dx̂ − x̂·mean(dx̂ ⊙ x̂)), dx̂ = dy ⊙ w, x̂ = x·r.
template <typename T>
Matrix<T> rms_norm_rows_backward(const Matrix<T>& x, const Vector<T>& w, double eps, const Matrix<T>& dy,
                                 Vector<T>& dw) {
  const auto n = static_cast<T>(x.cols());
  const Vector<T> r = ((x.array().square().rowwise().sum() / n) + static_cast<T>(eps)).rsqrt();
  const Array<T> x_hat = x.array().colwise() * r.array();
  dw += (dy.array() * x_hat).colwise().sum().matrix().transpose();
  const Array<T> dx_hat = dy.array().rowwise() * w.transpose().array();
  const Vector<T> mean = (dx_hat * x_hat).rowwise().sum() / n;
  return ((dx_hat - x_hat.colwise() * mean.array()).colwise() * r.array()).matrix();
}

template <typename T>
CrossEntropy<T> cross_entropy(const Matrix<T>& logits, const IndexVector& labels, const std::vector<bool>& padded,
                              double weight) {
  CrossEntropy<T> ce;
  const Vector<T> max = logits.rowwise().maxCoeff();
  ce.grad_logits = (logits.colwise() - max).array().exp().matrix();
  const Vector<T> sums = ce.grad_logits.rowwise().sum();
  for (Eigen::Index k = 0; k < logits.rows(); ++k) {
    if (padded[static_cast<size_t>(k)]) {
      ce.grad_logits.row(k).setZero();
      continue;
    }
    ce.sum += static_cast<double>(max(k) + std::log(sums(k)) - logits(k, labels(k)));
    ce.grad_logits.row(k) /= sums(k);  // softmax − onehot
    ce.grad_logits(k, labels(k)) -= T(1);
  }
  ce.grad_logits *= static_cast<T>(weight);
  return ce;
}

#define MOE_INSTANTIATE_DENSE_OPS(T)                                                                        \
  template Matrix<T> rms_norm_rows<T>(const Matrix<T>&, const Vector<T>&, double);                          \
  template Matrix<T> rms_norm_rows_backward<T>(const Matrix<T>&, const Vector<T>&, double, const Matrix<T>&, \
                                               Vector<T>&);                                                 \
  template CrossEntropy<T> cross_entropy<T>(const Matrix<T>&, const IndexVector&, const std::vector<bool>&, double);
MOE_INSTANTIATE_DENSE_OPS(double)
MOE_INSTANTIATE_DENSE_OPS(float)

}  // namespace moe::dist
