// SwiGLU with the DeepSeek-V4 clamp, for one token: the activation between fc1 and fc2.
//
//   a = fc1·u            [2d]  rows of fc1 are [gate; up]
//   g = min(a[:d], L)          gate clamped from above only
//   v = clip(a[d:], −L, L)     up (linear) half clamped both ways
//   act = silu(g) ⊙ v    [d]
// Gradients pass only strictly inside the clamp's interval: at a value equal to the limit the derivative is 0, as
// torch's clamp with scalar bounds gives it (Megatron's and transformers' SwiGLU). In float64 no value lands on the
// limit; in bf16 (8 significand bits) many do — a Megatron bf16 run had ~1 in 1,000 gradient rows on it.
#pragma once

#include "reference/score_functions.hpp"
#include "reference/tensor.hpp"

#include <algorithm>
#include <optional>

namespace moe {

template <typename T>
Vector<T> swiglu_activation(const Vector<T>& pre, std::optional<double> clamp) {
  const auto d = pre.size() / 2;
  Vector<T> act(d);
  for (Eigen::Index i = 0; i < d; ++i) {
    T g = pre(i);
    T v = pre(d + i);
    if (clamp) {
      const T limit = static_cast<T>(*clamp);
      g = std::min(g, limit);
      v = std::clamp(v, -limit, limit);
    }
    act(i) = silu(g) * v;
  }
  return act;
}

// d L / d pre [2d] from d L / d act [d].
template <typename T>
Vector<T> swiglu_activation_backward(const Vector<T>& pre, std::optional<double> clamp, const Vector<T>& grad_act) {
  const auto d = pre.size() / 2;
  Vector<T> grad_pre(2 * d);
  for (Eigen::Index i = 0; i < d; ++i) {
    T g = pre(i);
    T v = pre(d + i);
    bool gate_passes = true;
    bool up_passes = true;
    if (clamp) {
      const T limit = static_cast<T>(*clamp);
      gate_passes = g < limit;
      up_passes = v > -limit && v < limit;
      g = std::min(g, limit);
      v = std::clamp(v, -limit, limit);
    }
    const T s = sigmoid(g);  // once, for silu(g) = g·σ(g) and silu'(g)
    grad_pre(i) = gate_passes ? grad_act(i) * v * silu_grad(g, s) : T(0);
    grad_pre(d + i) = up_passes ? grad_act(i) * (g * s) : T(0);
  }
  return grad_pre;
}

}  // namespace moe
