// The parallel system's FP8 cast of the rows it dispatches, in the form a wire carries them: one e4m3 byte per
// element and one scale per 1×128 tile of each row (DeepSeek-V3's activation tiles, DeepGEMM's
// per_token_cast_to_fp8), and the dequantisation the expert side does. The semantics are reference/fp8_quant.hpp's;
// this is a second, bit-level implementation (its own e4m3 encoder working on the binary exponent and mantissa, not
// reference/minifloat.hpp's), so that the property suite can hold one against the other.
#pragma once

#include <cstdint>
#include <vector>

#include "reference/tensor.hpp"

namespace moe::kernels {

template <typename T>
struct Fp8Rows {
  Eigen::Index rows = 0, cols = 0;
  std::vector<std::uint8_t> codes;  // [rows, cols] row-major, e4m3
  Matrix<T> scales;                 // [rows, ⌈cols/128⌉]: amax/448 of each tile (amax floored at 1e-4)
};

template <typename T>
Fp8Rows<T> fp8_quantise_rows(const Matrix<T>& x);
template <typename T>
Matrix<T> fp8_dequantise_rows(const Fp8Rows<T>& q);

// The FP8 grouped GEMM wants every expert's row count a multiple of 16 (Megatron's get_fp8_align_size for the
// per-tensor and blockwise recipes; 32 for MXFP8): each local expert's rows are padded with zero rows of probability
// 0, which add nothing forward or backward, and stripped after. `position[i]` is row i's place among the padded rows.
inline constexpr int kFp8RowAlignment = 16;
struct AlignedGroups {
  std::vector<std::int64_t> group_sizes;  // each a multiple of the alignment
  std::vector<std::int64_t> position;     // [rows before padding]
  std::int64_t rows = 0;                  // after padding
};
AlignedGroups align_groups(const std::vector<std::int64_t>& group_sizes, int alignment);

// e4m3 (OCP E4M3FN) by bit arithmetic: round to nearest even, saturating to ±448 (cvt.rn.satfinite); NaN → 0x7F.
std::uint8_t e4m3_encode(double v);
double e4m3_decode(std::uint8_t code);

}  // namespace moe::kernels
