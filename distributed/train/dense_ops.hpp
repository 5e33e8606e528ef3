// The row-wise parts of the model on a rank (RMSNorm, cross-entropy): whole-matrix Eigen code, written apart
// from the oracle's per-row loops. Rows are this rank's local tokens; nothing here communicates.
#pragma once

#include "reference/tensor.hpp"

#include <vector>

namespace moe::dist {

// y = x·r ⊙ w, r = 1/sqrt(mean(x²) + eps), every row.
template <typename T>
Matrix<T> rms_norm_rows(const Matrix<T>& x, const Vector<T>& w, double eps);

// dx for upstream dy; adds Σ_rows dy ⊙ x̂ to dw.
template <typename T>
Matrix<T> rms_norm_rows_backward(const Matrix<T>& x, const Vector<T>& w, double eps, const Matrix<T>& dy,
                                 Vector<T>& dw);

// Σ over valid rows of (logsumexp(logits) − logits[label]) (accumulated in double) and its gradient × weight
// (0 on padded rows).
template <typename T>
struct CrossEntropy {
  double sum = 0;
  Matrix<T> grad_logits;
};
template <typename T>
CrossEntropy<T> cross_entropy(const Matrix<T>& logits, const IndexVector& labels, const std::vector<bool>& padded,
                              double weight);

}  // namespace moe::dist
