// bf16 storage, emulated in double or float: what a bf16 training run keeps between its operations.
//
// bf16 is the top half of an IEEE float: 1 sign, 8 exponent (bias 127), 7 mantissa bits, so 8 significant bits,
// the float's range, subnormals down to 2^−133 and ±inf. A value is stored by rounding to the nearest bf16, ties
// to even (NVIDIA's __float2bfloat16, torch's .to(torch.bfloat16) from float32); beyond the largest finite
// (1.1111111₂·2^127) it becomes ±inf, and NaN stays NaN.
//
// The model under `MoeConfig::bf16_storage` rounds at its storage points (docs/model.md, "bf16 storage: what a mixed-precision step rounds"): every per-token tensor
// one operation hands to the next, once it is whole; partial sums (an ETP or TP shard's share) are summed in the
// working precision first. The oracle and the parallel system call the same function at the same points.
#pragma once

#include "reference/tensor.hpp"

namespace moe {

// x rounded to the nearest bf16 (ties to even), exactly, for any double. Assumes the default rounding mode.
double round_bf16(double x);
// The same by its definition: x's quantum (the place value of bf16's last significant bit at x's binade) and
// nearbyint. round_bf16 is this, computed on the bits where x is a normal bf16-range double.
double round_bf16_by_quantum(double x);
inline float round_bf16(float x) { return static_cast<float>(round_bf16(static_cast<double>(x))); }

// Every entry of m rounded to bf16 in place (a block or a whole matrix).
template <typename Derived>
void round_bf16_in_place(const Eigen::MatrixBase<Derived>& m_) {
  auto& m = const_cast<Eigen::MatrixBase<Derived>&>(m_);  // Eigen's idiom for writable block arguments
  using T = typename Derived::Scalar;
  m = m.unaryExpr([](T v) { return round_bf16(v); });
}

// m rounded to bf16 when `bf16` holds (a storage point), else m unchanged. m is a Matrix<T> or a Vector<T>.
template <typename Scalar, int Rows, int Cols, int Options>
Eigen::Matrix<Scalar, Rows, Cols, Options> stored(bool bf16, Eigen::Matrix<Scalar, Rows, Cols, Options> m) {
  if (bf16) round_bf16_in_place(m);
  return m;
}

}  // namespace moe
