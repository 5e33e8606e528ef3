// Causal self-attention with grouped-query heads and rotary positions: the token-mixing layer of the model's
// pre-norm blocks (reference/model.hpp) — dense attention, not DeepSeek-V4's compressed sparse attention.
//
// Rows are the model's, t = s·batch + b (position s of sequence b); a token attends to the positions s' ≤ s of its
// own sequence. With H query heads, G key/value groups (H a multiple of G; head j reads group j / (H/G)) and head
// width d (even):
//   q = x·Wqᵀ [T, H·d]    k = x·Wkᵀ [T, G·d]    v = x·Wvᵀ [T, G·d]
//   RoPE (Megatron's default, not interleaved): in every head, element i < d/2 pairs with i + d/2 and the pair
//     (a, b) at position s becomes (a·cos φ − b·sin φ, b·cos φ + a·sin φ), φ = s·base^(−2i/d)
//   p_{s,s'} = softmax over s' ≤ s of ⟨q_s, k_s'⟩ / √d        per head, in its sequence
//   o_s = Σ p_{s,s'} v_s'      out = o·Woᵀ [T, h]
#pragma once

#include <vector>

#include "reference/tensor.hpp"

namespace moe {

struct AttentionConfig {
  int heads = 0;     // H
  int groups = 0;    // G (GQA: H/G query heads share one key/value head)
  int head_dim = 0;  // d, even
  double rope_base = 10000.0;
  // q, k and v (after the projection and after RoPE), the context o, the output, and the gradient of each stored
  // in bf16 (ModelConfig::attention_config: the model's bf16 storage). Values partial over TP are stored by the
  // caller once whole: the output and dx.
  bool bf16 = false;

  void validate() const;  // std::invalid_argument naming the rule
};

template <typename T>
struct AttentionWeights {
  Matrix<T> wq;  // [H·d, h]
  Matrix<T> wk;  // [G·d, h]
  Matrix<T> wv;  // [G·d, h]
  Matrix<T> wo;  // [h, H·d]
};
using AttentionParams = AttentionWeights<double>;

// f applied to each of the four weights (a cast, zeros of the same shape).
template <typename To, typename From, typename F>
AttentionWeights<To> map_weights(const AttentionWeights<From>& a, F f) {
  return {f(a.wq), f(a.wk), f(a.wv), f(a.wo)};
}

// What the backward needs from the forward.
struct AttentionForward {
  Matrix<double> q, k, v;             // after RoPE (v has none)
  Matrix<double> o;                   // [T, H·d]
  Matrix<double> out;                 // [T, h]
  std::vector<Matrix<double>> probs;  // per (sequence b, head j): [S, S], zero above the diagonal
};

struct AttentionGrads {
  AttentionParams params;  // same shapes
  Matrix<double> dx;       // [T, h]
};

// x: [seq·batch, h], rows t = s·batch + b.
AttentionForward attention_forward(const AttentionConfig& config, const AttentionParams& params,
                                   const Matrix<double>& x, int batch);
AttentionGrads attention_backward(const AttentionConfig& config, const AttentionParams& params, const Matrix<double>& x,
                                  int batch, const AttentionForward& forward, const Matrix<double>& dout);

// The projections, shared with the context-parallel layer: q, k and v of rows x, q and k rotated at each row's
// position (row_positions[t]); under bf16 storage each is stored after the projection and q, k again after RoPE.
void projection_forward(const AttentionConfig& config, const AttentionParams& params, const Matrix<double>& x,
                        const std::vector<int>& row_positions, Matrix<double>& q, Matrix<double>& k,
                        Matrix<double>& v);

// The backward of the projections, shared with the context-parallel layer: dq and dk (gradients after RoPE) are
// rotated back at each row's position, then give the weight gradients and dx (into `grads`). Under bf16 storage
// dq, dk and dv are stored as they come (whole) and dq, dk again after the rotation; dx is the caller's to store.
void projection_backward(const AttentionConfig& config, const AttentionParams& params, const Matrix<double>& x,
                         const std::vector<int>& row_positions, Matrix<double> dq, Matrix<double> dk,
                         const Matrix<double>& dv, AttentionGrads& grads);

// Head j of row t in a [T, n·d] block: its d elements (a view).
inline auto attention_head(Matrix<double>& m, Eigen::Index t, int j, int d) {
  return m.row(t).segment(Eigen::Index{j} * d, d);
}
inline auto attention_head(const Matrix<double>& m, Eigen::Index t, int j, int d) {
  return m.row(t).segment(Eigen::Index{j} * d, d);
}

// RoPE of one row of a [.., n·d] block at position s, in place (inverse = true rotates back: the backward).
void apply_rope(double* row, int heads, int head_dim, double base, int position, bool inverse = false);

}  // namespace moe
