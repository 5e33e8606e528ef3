// The types of the expert-compute interface (kernel_backend.hpp): an ETP shard of the local experts' weights, the
// SwiGLU options, and what the grouped SwiGLU forward and backward return. In their own header so that the interface,
// and every backend behind it (the Eigen one in grouped_swiglu.hpp, cuda/), depends on the types, not on a backend.
#pragma once

#include "reference/tensor.hpp"

#include <optional>
#include <vector>

namespace moe::kernels {

template <typename T>
struct ExpertShards {
  std::vector<Matrix<T>> fc1;  // per local expert [2·d_l, w], rows [gate slice; up slice]
  std::vector<Matrix<T>> fc2;  // per local expert [w, d_l]
};

struct SwigluOptions {
  std::optional<double> clamp;
  bool probs_on_input = false;
  bool bf16 = false;  // pre, p·act, and their gradients rounded to bf16 (MoeConfig::bf16_storage)
  bool clamp_limit_passes = false;  // a pre-activation exactly on ±L passes its gradient (MoeConfig::clamp_limit_passes)
};

template <typename T>
struct GroupedSwigluForward {
  Matrix<T> y;    // [rows, w] partial over ETP
  Matrix<T> pre;  // [rows, 2·d_l] saved for the backward
};

template <typename T>
struct GroupedSwigluBackward {
  Matrix<T> dx;     // [rows, w]
  Vector<T> dprob;  // [rows]
};

}  // namespace moe::kernels
