#include "distributed/dense_ops.hpp"

#include <cmath>

namespace moe::dist {
namespace {
using Array = Eigen::Array<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
}

Matrix<double> rms_norm_rows(const Matrix<double>& x, const Vector<double>& w, double eps) {
  const Vector<double> r = ((x.array().square().rowwise().sum() / static_cast<double>(x.cols())) + eps).rsqrt();
  return ((x.array().colwise() * r.array()).rowwise() * w.transpose().array()).matrix();
}

// dx = r·(dx̂ − x̂·mean(dx̂ ⊙ x̂)), dx̂ = dy ⊙ w, x̂ = x·r.
Matrix<double> rms_norm_rows_backward(const Matrix<double>& x, const Vector<double>& w, double eps,
                                      const Matrix<double>& dy, Vector<double>& dw) {
  const auto n = static_cast<double>(x.cols());
  const Vector<double> r = ((x.array().square().rowwise().sum() / n) + eps).rsqrt();
  const Array x_hat = x.array().colwise() * r.array();
  dw += (dy.array() * x_hat).colwise().sum().matrix().transpose();
  const Array dx_hat = dy.array().rowwise() * w.transpose().array();
  const Vector<double> mean = (dx_hat * x_hat).rowwise().sum() / n;
  return ((dx_hat - x_hat.colwise() * mean.array()).colwise() * r.array()).matrix();
}

CrossEntropy cross_entropy(const Matrix<double>& logits, const IndexVector& labels, const std::vector<bool>& padded,
                           double weight) {
  CrossEntropy ce;
  const Vector<double> max = logits.rowwise().maxCoeff();
  ce.grad_logits = (logits.colwise() - max).array().exp().matrix();
  const Vector<double> sums = ce.grad_logits.rowwise().sum();
  for (Eigen::Index k = 0; k < logits.rows(); ++k) {
    if (padded[static_cast<size_t>(k)]) {
      ce.grad_logits.row(k).setZero();
      continue;
    }
    ce.sum += max(k) + std::log(sums(k)) - logits(k, labels(k));
    ce.grad_logits.row(k) /= sums(k);  // softmax − onehot
    ce.grad_logits(k, labels(k)) -= 1.0;
  }
  ce.grad_logits *= weight;
  return ce;
}

}  // namespace moe::dist
