#include "distributed/kernels/fp8_rows.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace moe::kernels {
namespace {

constexpr Eigen::Index kTile = 128;
constexpr std::uint8_t kNaN = 0x7F, kLargest = 0x7E;  // S.1111.111 and S.1111.110 = 448

}  // namespace

// |v| = 2m·2^E with 2m in [1, 2). Normal codes (E ≥ −6) hold 3 fraction bits: |v|·2^(3−E) rounded to an integer q in
// [8, 16] is 8 + mantissa, and q = 16 carries into the exponent field by plain addition. Below 2^−6 the subnormals
// are multiples of 2^−9. Halfway between 448 and the next step (480, which e4m3 spends on NaN) is 464: from there
// up, satfinite gives 448.
std::uint8_t e4m3_encode(double v) {
  if (std::isnan(v)) return kNaN;
  const std::uint8_t sign = std::signbit(v) ? 0x80 : 0x00;
  const double a = std::fabs(v);
  if (a >= 464.0) return sign | kLargest;
  if (a == 0.0) return sign;
  int e = 0;
  std::frexp(a, &e);
  const int exponent = e - 1;
  if (exponent < -6) return sign | static_cast<std::uint8_t>(std::nearbyint(std::ldexp(a, 9)));
  const auto q = static_cast<int>(std::nearbyint(std::ldexp(a, 3 - exponent)));
  return sign | static_cast<std::uint8_t>(((exponent + 7) << 3) + (q - 8));
}

double e4m3_decode(std::uint8_t code) {
  const int field = (code >> 3) & 0xF, mantissa = code & 0x7;
  if (field == 15 && mantissa == 7) return std::numeric_limits<double>::quiet_NaN();
  const double magnitude = field == 0 ? std::ldexp(mantissa, -9) : std::ldexp(8 + mantissa, field - 10);
  return (code & 0x80) ? -magnitude : magnitude;
}

AlignedGroups align_groups(const std::vector<std::int64_t>& group_sizes, int alignment) {
  AlignedGroups a;
  for (std::int64_t size : group_sizes) {
    for (std::int64_t i = 0; i < size; ++i) a.position.push_back(a.rows + i);
    const std::int64_t padded = (size + alignment - 1) / alignment * alignment;
    a.group_sizes.push_back(padded);
    a.rows += padded;
  }
  return a;
}

template <typename T>
Fp8Rows<T> fp8_quantise_rows(const Matrix<T>& x) {
  Fp8Rows<T> q;
  q.rows = x.rows();
  q.cols = x.cols();
  q.codes.resize(static_cast<size_t>(x.size()));
  q.scales.resize(x.rows(), (x.cols() + kTile - 1) / kTile);
  for (Eigen::Index r = 0; r < x.rows(); ++r) {
    for (Eigen::Index tile = 0; tile < q.scales.cols(); ++tile) {
      const Eigen::Index begin = tile * kTile, end = std::min(begin + kTile, x.cols());
      T amax = T(0);
      for (Eigen::Index j = begin; j < end; ++j) amax = std::max(amax, std::abs(x(r, j)));
      const T scale = std::max(amax, T(1e-4)) / T(448);
      const T inverse = T(1) / scale;
      q.scales(r, tile) = scale;
      for (Eigen::Index j = begin; j < end; ++j)
        q.codes[static_cast<size_t>(r * x.cols() + j)] = e4m3_encode(static_cast<double>(x(r, j) * inverse));
    }
  }
  return q;
}

template <typename T>
Matrix<T> fp8_dequantise_rows(const Fp8Rows<T>& q) {
  Matrix<T> x(q.rows, q.cols);
  for (Eigen::Index r = 0; r < q.rows; ++r)
    for (Eigen::Index j = 0; j < q.cols; ++j)
      x(r, j) = static_cast<T>(e4m3_decode(q.codes[static_cast<size_t>(r * q.cols + j)])) * q.scales(r, j / kTile);
  return x;
}

template Fp8Rows<double> fp8_quantise_rows<double>(const Matrix<double>&);
template Fp8Rows<float> fp8_quantise_rows<float>(const Matrix<float>&);
template Matrix<double> fp8_dequantise_rows<double>(const Fp8Rows<double>&);
template Matrix<float> fp8_dequantise_rows<float>(const Fp8Rows<float>&);

}  // namespace moe::kernels
