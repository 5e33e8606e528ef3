#include "reference/fp8_quant.hpp"

#include "reference/minifloat.hpp"

#include <algorithm>
#include <cmath>

namespace moe {

template <typename T>
Matrix<T> fp8_fake_quant_rows(const Matrix<T>& x) {
  Matrix<T> out(x.rows(), x.cols());
  for (Eigen::Index r = 0; r < x.rows(); ++r)
    for (Eigen::Index begin = 0; begin < x.cols(); begin += kFp8TileWidth) {
      const Eigen::Index n = std::min<Eigen::Index>(kFp8TileWidth, x.cols() - begin);
      T amax = T(0);
      for (Eigen::Index j = begin; j < begin + n; ++j) amax = std::max(amax, std::abs(x(r, j)));
      const T scale = std::max(amax, T(1e-4)) / T(448);
      const T inverse = T(1) / scale;
      for (Eigen::Index j = begin; j < begin + n; ++j)
        out(r, j) = static_cast<T>(round_to(Minifloat::e4m3, static_cast<double>(x(r, j) * inverse))) * scale;
    }
  return out;
}

template Matrix<double> fp8_fake_quant_rows<double>(const Matrix<double>&);
template Matrix<float> fp8_fake_quant_rows<float>(const Matrix<float>&);

}  // namespace moe
