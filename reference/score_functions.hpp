// Elementwise functions of the router and the experts, with the derivatives the backward needs.
// Header-only: tiny, and shared by the router, the aux losses and the SwiGLU experts.
#pragma once

#include "reference/tensor.hpp"

#include <cmath>

namespace moe {

template <typename T>
T sigmoid(T x) {
  // Two branches so that exp never overflows.
  if (x >= 0) return T(1) / (T(1) + std::exp(-x));
  const T e = std::exp(x);
  return e / (T(1) + e);
}

// torch.nn.functional.softplus with beta 1, threshold 20: x itself above the threshold.
template <typename T>
T softplus(T x) {
  return x > T(20) ? x : std::log1p(std::exp(x));
}

// d softplus / dx as torch computes it: 1 above the threshold, sigmoid(x) below.
template <typename T>
T softplus_grad(T x) {
  return x > T(20) ? T(1) : sigmoid(x);
}

template <typename T>
T silu(T x) {
  return x * sigmoid(x);
}

// d silu / dx = σ(x)·(1 + x·(1 − σ(x))), given s = σ(x) (a caller that also needs silu computes σ once)
template <typename T>
T silu_grad(T x, T s) {
  return s * (T(1) + x * (T(1) - s));
}

// Softmax of one row, max-shifted.
template <typename T>
RowVector<T> softmax(const RowVector<T>& logits) {
  const RowVector<T> e = (logits.array() - logits.maxCoeff()).exp();
  return e / e.sum();
}

template <typename T>
T logsumexp(const RowVector<T>& logits) {
  const T m = logits.maxCoeff();
  return m + std::log((logits.array() - m).exp().sum());
}

// Backward of p = softmax(l): dl = p ⊙ (dp − ⟨p, dp⟩).
template <typename T>
RowVector<T> softmax_backward(const RowVector<T>& p, const RowVector<T>& dp) {
  return p.cwiseProduct((dp.array() - p.dot(dp)).matrix());
}

// Backward of w = s / (Σ s + eps) for a vector s: ds_i = dw_i/(S+eps) − Σ_j dw_j·s_j/(S+eps)².
template <typename T>
RowVector<T> normalise_backward(const RowVector<T>& s, T eps, const RowVector<T>& dw) {
  const T denom = s.sum() + eps;
  return (dw.array() / denom - dw.dot(s) / (denom * denom)).matrix();
}

}  // namespace moe
