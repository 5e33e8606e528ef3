// SwiGLU with the DeepSeek-V4 clamp, for one token: the activation between fc1 and fc2.
//
//   a = fc1·u            [2d]  rows of fc1 are [gate; up]
//   g = min(a[:d], L)          gate clamped from above only
//   v = clip(a[d:], −L, L)     up (linear) half clamped both ways
//   act = silu(g) ⊙ v    [d]
// Gradients pass strictly inside the clamp's interval: at a value equal to the limit the derivative is 0, the
// minimum-norm subgradient (torch 2.15's clamp with scalar bounds). `limit_passes` gives 1 there instead, as torch
// 2.11's clamp does (the clamp-limit-passes-gradient deviation). In float64 no value lands on the limit; in bf16
// (8 significand bits) many do: a Megatron bf16 layer with L = 0.5 had a dozen in 64 tokens.
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
Vector<T> swiglu_activation_backward(const Vector<T>& pre, std::optional<double> clamp, bool limit_passes,
                                     const Vector<T>& grad_act) {
  const auto d = pre.size() / 2;
  Vector<T> grad_pre(2 * d);
  for (Eigen::Index i = 0; i < d; ++i) {
    T g = pre(i);
    T v = pre(d + i);
    bool gate_passes = true;
    bool up_passes = true;
    if (clamp) {
      const T limit = static_cast<T>(*clamp);
      gate_passes = limit_passes ? g <= limit : g < limit;
      up_passes = limit_passes ? (v >= -limit && v <= limit) : (v > -limit && v < limit);
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
