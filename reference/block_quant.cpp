#include "reference/block_quant.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace moe {
namespace {

Eigen::Index blocks_of(Eigen::Index n, int block) { return (n + block - 1) / block; }

// e2m1 elements times their block's scale: scale(code) of the block's scale code.
template <typename Scale>
Matrix<double> dequantise_e2m1(Eigen::Index rows, Eigen::Index cols, int block,
                               const std::vector<std::uint8_t>& elements, const std::vector<std::uint8_t>& scales,
                               Scale scale) {
  Matrix<double> x(rows, cols);
  const Eigen::Index per_row = blocks_of(cols, block);
  for (Eigen::Index r = 0; r < rows; ++r)
    for (Eigen::Index j = 0; j < cols; ++j)
      x(r, j) = decode(Minifloat::e2m1, elements[static_cast<size_t>(r * cols + j)]) *
                scale(scales[static_cast<size_t>(r * per_row + j / block)]);
  return x;
}

double block_amax(const Matrix<double>& x, Eigen::Index r, Eigen::Index begin, Eigen::Index end) {
  double amax = 0;
  for (Eigen::Index j = begin; j < end; ++j) {
    if (!std::isfinite(x(r, j))) throw std::invalid_argument("block quantisation: a NaN or infinite element");
    amax = std::max(amax, std::abs(x(r, j)));
  }
  return amax;
}

}  // namespace

Matrix<double> fp8_fake_quant_blocks(const Matrix<double>& w, Minifloat format, int block) {
  if (format == Minifloat::e2m1) throw std::invalid_argument("FP8 blocks: the format must be e4m3 or e5m2");
  if (block < 1) throw std::invalid_argument("FP8 blocks: the block must be at least 1");
  Matrix<double> out(w.rows(), w.cols());
  for (Eigen::Index r0 = 0; r0 < w.rows(); r0 += block)
    for (Eigen::Index c0 = 0; c0 < w.cols(); c0 += block) {
      const Eigen::Index r1 = std::min<Eigen::Index>(r0 + block, w.rows()),
                         c1 = std::min<Eigen::Index>(c0 + block, w.cols());
      double amax = 0;
      for (Eigen::Index r = r0; r < r1; ++r) amax = std::max(amax, block_amax(w, r, c0, c1));
      const double scale = std::max(amax, 1e-4) / largest_finite(format);
      for (Eigen::Index r = r0; r < r1; ++r)
        for (Eigen::Index c = c0; c < c1; ++c) out(r, c) = round_to(format, w(r, c) / scale) * scale;
    }
  return out;
}

Mxfp4 mxfp4_quantise(const Matrix<double>& x) {
  Mxfp4 q{x.rows(), x.cols(), std::vector<std::uint8_t>(static_cast<size_t>(x.size())), {}};
  for (Eigen::Index r = 0; r < x.rows(); ++r)
    for (Eigen::Index begin = 0; begin < x.cols(); begin += kMxBlock) {
      const Eigen::Index end = std::min<Eigen::Index>(begin + kMxBlock, x.cols());
      const double amax = block_amax(x, r, begin, end);
      int exponent = -127;
      if (amax > 0) {
        int e = 0;
        std::frexp(amax, &e);  // amax = m·2^e, m in [0.5, 1): ⌊log2 amax⌋ = e − 1
        exponent = std::clamp(e - 1 - 2, -127, 127);
      }
      q.scales.push_back(e8m0_of_exponent(exponent));
      for (Eigen::Index j = begin; j < end; ++j)
        q.elements[static_cast<size_t>(r * x.cols() + j)] = encode(Minifloat::e2m1, std::ldexp(x(r, j), -exponent));
    }
  return q;
}

Matrix<double> mxfp4_dequantise(const Mxfp4& q) {
  return dequantise_e2m1(q.rows, q.cols, kMxBlock, q.elements, q.scales, decode_e8m0);
}

Nvfp4 nvfp4_quantise(const Matrix<double>& x) {
  Nvfp4 q{x.rows(), x.cols(), std::vector<std::uint8_t>(static_cast<size_t>(x.size())), {}, 0.0f};
  double tensor_amax = 0;
  for (Eigen::Index r = 0; r < x.rows(); ++r) tensor_amax = std::max(tensor_amax, block_amax(x, r, 0, x.cols()));
  q.tensor_scale = tensor_amax > 0 ? static_cast<float>(448.0 * 6.0 / tensor_amax) : 1.0f;
  const double s = q.tensor_scale;
  for (Eigen::Index r = 0; r < x.rows(); ++r)
    for (Eigen::Index begin = 0; begin < x.cols(); begin += kNvfp4Block) {
      const Eigen::Index end = std::min<Eigen::Index>(begin + kNvfp4Block, x.cols());
      const std::uint8_t d = encode(Minifloat::e4m3, block_amax(x, r, begin, end) / 6.0 * s);
      q.scales.push_back(d);
      const double scale = decode(Minifloat::e4m3, d) / s;  // what one element step of e2m1 is worth
      for (Eigen::Index j = begin; j < end; ++j)
        q.elements[static_cast<size_t>(r * x.cols() + j)] = scale > 0 ? encode(Minifloat::e2m1, x(r, j) / scale) : 0;
    }
  return q;
}

Matrix<double> nvfp4_dequantise(const Nvfp4& q) {
  const double tensor_scale = q.tensor_scale;
  return dequantise_e2m1(q.rows, q.cols, kNvfp4Block, q.elements, q.scales,
                         [&](std::uint8_t code) { return decode(Minifloat::e4m3, code) / tensor_scale; });
}

}  // namespace moe
