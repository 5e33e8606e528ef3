// Tensors of the oracle: row-major Eigen matrices, so that row t of a [T, h] activation is token t, as in torch.
#pragma once

#include <Eigen/Dense>

#include <cstdint>

namespace moe {

template <typename T>
using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using Vector = Eigen::Matrix<T, Eigen::Dynamic, 1>;
template <typename T>
using RowVector = Eigen::Matrix<T, 1, Eigen::Dynamic>;

using IndexMatrix = Eigen::Matrix<std::int64_t, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using IndexVector = Eigen::Matrix<std::int64_t, Eigen::Dynamic, 1>;
using BoolMatrix = Eigen::Matrix<bool, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

}  // namespace moe
