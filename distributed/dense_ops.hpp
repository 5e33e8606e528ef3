// The row-wise parts of the model on a rank (RMSNorm, cross-entropy): whole-matrix Eigen code, written apart
// from the oracle's per-row loops. Rows are this rank's local tokens; nothing here communicates.
#pragma once

#include "reference/tensor.hpp"

#include <vector>

namespace moe::dist {

// y = x·r ⊙ w, r = 1/sqrt(mean(x²) + eps), every row.
Matrix<double> rms_norm_rows(const Matrix<double>& x, const Vector<double>& w, double eps);

// dx for upstream dy; adds Σ_rows dy ⊙ x̂ to dw.
Matrix<double> rms_norm_rows_backward(const Matrix<double>& x, const Vector<double>& w, double eps,
                                      const Matrix<double>& dy, Vector<double>& dw);

// Σ over valid rows of (logsumexp(logits) − logits[label]) and its gradient × weight (0 on padded rows).
struct CrossEntropy {
  double sum = 0;
  Matrix<double> grad_logits;
};
CrossEntropy cross_entropy(const Matrix<double>& logits, const IndexVector& labels, const std::vector<bool>& padded,
                           double weight);

}  // namespace moe::dist
