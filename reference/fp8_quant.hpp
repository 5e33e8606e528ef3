// FP8 activations as DeepSeek-V3 sends them to the experts: each token row cut into 1×128 tiles (the last one
// shorter when the width is not a multiple of 128), each tile scaled by its own
//   s = max(amax, 1e-4) / 448            (amax: the tile's largest |x|; 448 the largest e4m3)
//   q = e4m3(x · (1/s)),  x' = q · s      (round to nearest even, saturating: reference/minifloat.hpp)
// DeepGEMM's per_token_cast_to_fp8 without its UE8M0 option. The model's `fp8_dispatch` fake-quantises the rows the
// routed experts see, at the source rank, before the dispatch; the backward passes gradients straight through.
// Emulated in the run's precision T (the products and the division in T).
#pragma once

#include "reference/tensor.hpp"

namespace moe {

inline constexpr int kFp8TileWidth = 128;

// Every row of x, tile by tile, replaced by its FP8 value x'.
template <typename T>
Matrix<T> fp8_fake_quant_rows(const Matrix<T>& x);

}  // namespace moe
