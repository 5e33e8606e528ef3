// The oracle's experts, expert by expert: the same SwiGLU formulas as the per-token definition in moe_layer.cpp
// (expert_forward / expert_backward), computed for all the rows routed to one expert at once, so that each expert's
// weights are read once per layer instead of once per token and the products are GEMMs:
//
//   rows of expert e: R_e = {t : routing_map(t, e)} in rising t        U_e = u[R_e]  [n_e, w]    p_e = probs[R_e, e]
//   PRE = U_e·fc1ᵀ  (p_e ⊙ U_e with probs on the input)                ACT = swiglu(PRE)          [n_e, d]
//   OUT = (p_e ⊙ ACT)·fc2ᵀ  (ACT with probs on the input)              z[R_e] += OUT
//
// Experts are taken in rising e, so each row of z (and of dL/du) gets its experts' terms in the order the per-token
// form adds them; what differs is only how each product is blocked and summed (GEMM against GEMV), a reassociation
// within the double tolerance of reference/tolerance.hpp, which tests hold it to (expert_batched_test.cpp).
// Memory beyond the parameters and gradients: one expert's rows, O(n_e·(w + 2d)).
#pragma once

#include "reference/config.hpp"
#include "reference/moe_layer.hpp"

namespace moe {

// z [T, w] += Σ_e F_e(u rows of e); the routed branch of the forward.
template <typename T>
void routed_forward_batched(const MoeConfig& c, const MoeParams<T>& p, const Routing<T>& r, const Matrix<T>& u,
                            Matrix<T>& z);

// The routed branch's backward: adds into the expert gradients of `g`, grad_u [T, w] and grad_probs [T, E]; with
// `z` non-null also recomputes the forward's z (latent MoE needs it for latent_up's gradient).
template <typename T>
void routed_backward_batched(const MoeConfig& c, const MoeParams<T>& p, const Routing<T>& r, const Matrix<T>& u,
                             const Matrix<T>& grad_z, MoeParams<T>& g, Matrix<T>& grad_u, Matrix<T>& grad_probs,
                             Matrix<T>* z);

// y [T, h] += γ ⊙ F_s(x), γ = σ(x·w_gᵀ) with the shared expert's gate, else 1.
template <typename T>
void shared_forward_batched(const MoeConfig& c, const MoeParams<T>& p, const Matrix<T>& x, Matrix<T>& y);

// Adds the shared expert's and its gate's gradients into `g` and dL/dx into grad_x.
template <typename T>
void shared_backward_batched(const MoeConfig& c, const MoeParams<T>& p, const Matrix<T>& x, const Matrix<T>& grad_y,
                             MoeParams<T>& g, Matrix<T>& grad_x);

// One routed expert over a block of rows, wherever they come from: compare stacks the rows of every replica routed
// to expert e and reads e's weights from the dump once (moe_layer.hpp: finish_forward). u [n, w] the rows' inputs,
// probs [n] their probabilities for e; `path` per_token computes row by row with the definition
// (expert_definition.hpp), expert_batched with GEMMs. Shapes are checked (std::invalid_argument).
template <typename T>
Matrix<T> routed_expert_forward(const MoeConfig& c, const Matrix<T>& fc1, const Matrix<T>& fc2, const Matrix<T>& u,
                                const Vector<T>& probs, ExpertPath path);

template <typename T>
struct RoutedExpertBackward {
  Matrix<T> output;      // [n, w] the forward's output rows, when asked (from the same products: one visit)
  Matrix<T> grad_input;  // [n, w] dL/du
  Vector<T> grad_prob;   // [n]    dL/dp
};

// For grad_out [n, w] = dL/d(the expert's output rows): adds the expert's weight gradients into grad_fc1 [2d, w]
// and grad_fc2 [w, d]; with `with_output` also gives the forward's output rows (what routed_expert_forward gives).
template <typename T>
RoutedExpertBackward<T> routed_expert_backward(const MoeConfig& c, const Matrix<T>& fc1, const Matrix<T>& fc2,
                                               const Matrix<T>& u, const Vector<T>& probs, const Matrix<T>& grad_out,
                                               Matrix<T>& grad_fc1, Matrix<T>& grad_fc2, bool with_output,
                                               ExpertPath path);

}  // namespace moe
