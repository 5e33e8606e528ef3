// Eigen tensors of the oracle <-> .npy arrays. Both are C order (the oracle's matrices are row-major), so the data
// is copied as is. Reals are stored as double whatever the scalar T (a float widens exactly, so a float result
// survives the trip back); reading converts to T.
#pragma once

#include "formats/npy.hpp"
#include "reference/tensor.hpp"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace moe::formats {

template <typename T>
NpyArray from_matrix(const Matrix<T>& m) {
  return NpyArray::of_reals({m.rows(), m.cols()}, std::vector<double>(m.data(), m.data() + m.size()));
}

inline NpyArray from_index_matrix(const IndexMatrix& m) {
  return NpyArray::of_integers({m.rows(), m.cols()}, {m.data(), m.data() + m.size()});
}

template <typename T>
NpyArray from_vector(const Vector<T>& v) {
  return NpyArray::of_reals({v.size()}, std::vector<double>(v.data(), v.data() + v.size()));
}

inline NpyArray from_scalar(double value) { return NpyArray::of_reals({}, {value}); }

// E × [r, c] -> [E, r, c]
template <typename T>
NpyArray from_stack(const std::vector<Matrix<T>>& ms) {
  std::vector<double> values;
  for (const auto& m : ms) values.insert(values.end(), m.data(), m.data() + m.size());
  const auto r = ms.empty() ? 0 : ms.front().rows(), c = ms.empty() ? 0 : ms.front().cols();
  return NpyArray::of_reals({static_cast<std::int64_t>(ms.size()), r, c}, std::move(values));
}

template <typename T = double>
Matrix<T> to_matrix(const NpyArray& a) {
  Matrix<T> m(a.shape[0], a.shape[1]);
  std::transform(a.reals.begin(), a.reals.end(), m.data(), [](double v) { return static_cast<T>(v); });
  return m;
}

inline IndexMatrix to_index_matrix(const NpyArray& a) {
  IndexMatrix m(a.shape[0], a.shape[1]);
  std::copy(a.integers.begin(), a.integers.end(), m.data());
  return m;
}

template <typename T = double>
std::vector<Matrix<T>> to_stack(const NpyArray& a) {
  std::vector<Matrix<T>> ms;
  const auto per = a.shape[1] * a.shape[2];
  for (std::int64_t e = 0; e < a.shape[0]; ++e) {
    Matrix<T> m(a.shape[1], a.shape[2]);
    std::transform(a.reals.begin() + e * per, a.reals.begin() + (e + 1) * per, m.data(),
                   [](double v) { return static_cast<T>(v); });
    ms.push_back(std::move(m));
  }
  return ms;
}

template <typename T = double>
Vector<T> to_vector(const NpyArray& a) {
  return Eigen::Map<const Vector<double>>(a.reals.data(), static_cast<Eigen::Index>(a.reals.size())).cast<T>();
}

}  // namespace moe::formats
