// Eigen tensors of the oracle <-> .npy arrays. Both are C order (the oracle's matrices are row-major), so the data
// is copied as is.
#pragma once

#include "golden/npy.hpp"
#include "reference/tensor.hpp"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace moe::golden {

inline NpyArray from_matrix(const Matrix<double>& m) {
  return NpyArray::of_reals({m.rows(), m.cols()}, {m.data(), m.data() + m.size()});
}

inline NpyArray from_index_matrix(const IndexMatrix& m) {
  return NpyArray::of_integers({m.rows(), m.cols()}, {m.data(), m.data() + m.size()});
}

inline NpyArray from_vector(const Vector<double>& v) {
  return NpyArray::of_reals({v.size()}, {v.data(), v.data() + v.size()});
}

inline NpyArray from_scalar(double value) { return NpyArray::of_reals({}, {value}); }

// E × [r, c] -> [E, r, c]
inline NpyArray from_stack(const std::vector<Matrix<double>>& ms) {
  std::vector<double> values;
  for (const auto& m : ms) values.insert(values.end(), m.data(), m.data() + m.size());
  const auto r = ms.empty() ? 0 : ms.front().rows(), c = ms.empty() ? 0 : ms.front().cols();
  return NpyArray::of_reals({static_cast<std::int64_t>(ms.size()), r, c}, std::move(values));
}

inline Matrix<double> to_matrix(const NpyArray& a) {
  Matrix<double> m(a.shape[0], a.shape[1]);
  std::copy(a.reals.begin(), a.reals.end(), m.data());
  return m;
}

inline IndexMatrix to_index_matrix(const NpyArray& a) {
  IndexMatrix m(a.shape[0], a.shape[1]);
  std::copy(a.integers.begin(), a.integers.end(), m.data());
  return m;
}

inline std::vector<Matrix<double>> to_stack(const NpyArray& a) {
  std::vector<Matrix<double>> ms;
  const auto per = a.shape[1] * a.shape[2];
  for (std::int64_t e = 0; e < a.shape[0]; ++e) {
    Matrix<double> m(a.shape[1], a.shape[2]);
    std::copy(a.reals.begin() + e * per, a.reals.begin() + (e + 1) * per, m.data());
    ms.push_back(std::move(m));
  }
  return ms;
}

inline Vector<double> to_vector(const NpyArray& a) {
  return Eigen::Map<const Vector<double>>(a.reals.data(), static_cast<Eigen::Index>(a.reals.size()));
}

}  // namespace moe::golden
