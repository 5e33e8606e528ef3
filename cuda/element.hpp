// The data types of the CUDA backend's kernels: double, float and bf16 data, each with its accumulation type
// (bf16 and float accumulate in float, double in double). Probabilities, router scores and per-row reductions
// are kept in the accumulation type. Host headers of the kernels must stay C++17 (nvcc compiles them).
#pragma once

#include "cuda/bfloat16.hpp"

namespace moe::cuda {

template <typename T>
struct AccumulatorOf {
  using type = T;
};
template <>
struct AccumulatorOf<bf16> {
  using type = float;
};
template <typename T>
using Acc = typename AccumulatorOf<T>::type;

}  // namespace moe::cuda
