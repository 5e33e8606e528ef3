// Block-scaled quantisation of weights, emulated bit-exactly on the CPU (the element formats are minifloat.hpp's):
//
//   FP8 blocks (DeepSeek-V3 weights)   128×128 blocks, one scale per block: s = max(amax, 1e-4) / max_finite,
//                                      q = fmt(x / s) (e4m3 or e5m2), x' = q·s
//   MXFP4 (OCP MX v1.0)                32 consecutive elements of a row, one E8M0 scale 2^X with
//                                      X = ⌊log2 amax⌋ − 2 (2 = e2m1's largest exponent), clamped to [−127, 127];
//                                      q = e2m1(x / 2^X), saturating (an amax with significand above 1.5 lands on
//                                      6 = 1.5·2^2 after saturation, as the spec allows); amax = 0 gives X = −127
//   NVFP4 (NVIDIA, two-level)          16 consecutive elements of a row; a tensor scale S = 448·6 / amax_tensor
//                                      held in fp32; each block's scale d = e4m3(amax_block / 6 · S) (so d/S ≈
//                                      amax_block / 6); q = e2m1(x / (d / S)), x' = q · (d / S); a zero block has d = 0
//
// Rounding is to nearest even with saturation throughout. Arithmetic is double except where the recipe stores a
// narrower value (the fp32 tensor scale, the e4m3 and e8m0 codes). Blocks never cross rows; a row whose length is
// not a multiple of the block has a shorter last block.
#pragma once

#include <cstdint>
#include <vector>

#include "reference/minifloat.hpp"
#include "reference/tensor.hpp"

namespace moe {

inline constexpr int kFp8WeightBlock = 128;
inline constexpr int kMxBlock = 32;
inline constexpr int kNvfp4Block = 16;

// FP8 weights: x' of every element, block by block.
Matrix<double> fp8_fake_quant_blocks(const Matrix<double>& w, Minifloat format = Minifloat::e4m3,
                                     int block = kFp8WeightBlock);

// MXFP4 codes of a matrix: e2m1 codes row-major, and one e8m0 code per block [rows, ⌈cols/32⌉] row-major.
struct Mxfp4 {
  Eigen::Index rows = 0, cols = 0;
  std::vector<std::uint8_t> elements, scales;
};
Mxfp4 mxfp4_quantise(const Matrix<double>& x);
Matrix<double> mxfp4_dequantise(const Mxfp4& q);

// NVFP4 codes: e2m1 elements, one e4m3 scale per block of 16, and the fp32 tensor scale S.
struct Nvfp4 {
  Eigen::Index rows = 0, cols = 0;
  std::vector<std::uint8_t> elements, scales;
  float tensor_scale = 0;
};
Nvfp4 nvfp4_quantise(const Matrix<double>& x);
Matrix<double> nvfp4_dequantise(const Nvfp4& q);

}  // namespace moe
