// Elementwise parts of the grouped SwiGLU on device (the GEMMs are gemm.hpp calls in grouped_swiglu.cpp):
//   forward   act = silu(min(gate, L)) ⊙ clip(up, ±L),  h = p ⊙ act (p after the activation; null p = 1)
//   backward  from g_h = dL/dh: dprob = Σ_c act ⊙ g_h, g_act = p ⊙ g_h, and g_pre = [g_gate; g_up] with the
//             gradient masked where the clamp was active; act_scaled = p ⊙ act for the fc2 weight gradient.
// pre [rows, 2d] = [gate | up] per row (the fc1 output). Arithmetic in the accumulation type; rows reduce with
// one warp per row in a fixed order. This header stays C++17 (nvcc compiles it).
#pragma once

#include "cuda/element.hpp"

#include <cuda_runtime.h>

#include <cstdint>

namespace moe::cuda {

struct SwigluClamp {
  bool enabled = false;
  double limit = 0;
  bool limit_passes = false;  // a value exactly on ±L passes its gradient (clamp-limit-passes-gradient)
};

template <typename T>
void swiglu_activation(cudaStream_t stream, std::int64_t rows, std::int64_t d, const T* pre, const Acc<T>* probs,
                       SwigluClamp clamp, T* h);

template <typename T>
void swiglu_activation_backward(cudaStream_t stream, std::int64_t rows, std::int64_t d, const T* pre,
                                const Acc<T>* probs, SwigluClamp clamp, const T* g_h, T* g_pre, T* act_scaled,
                                Acc<T>* dprob);

// out[r] = p[r]·x[r] (in place allowed).
template <typename T>
void scale_rows(cudaStream_t stream, std::int64_t rows, std::int64_t width, const T* x, const Acc<T>* p, T* out);

// out[r] = ⟨a[r], b[r]⟩.
template <typename T>
void row_dot(cudaStream_t stream, std::int64_t rows, std::int64_t width, const T* a, const T* b, Acc<T>* out);

// A bf16 storage point of the model (MoeConfig::bf16_storage): every one of `count` values rounded to the nearest
// bf16, ties to even, in place, exactly as reference/bf16.hpp's round_bf16 does (double rounded directly, not via
// float, which could round twice). For bf16 data, nothing to do.
template <typename T>
void round_to_bf16(cudaStream_t stream, T* data, std::int64_t count);

}  // namespace moe::cuda
