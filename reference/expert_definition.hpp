// The per-token definition of one SwiGLU expert: one token through one expert, matrix-vector products written as
// the formulas read (docs/layer.md, "Routed experts"). The layer's per-token path (moe_layer.cpp) and the per-token
// form of one expert over a block of rows (expert_batched.cpp, which compare streams) both call these, so there is
// one definition.
//
//   pre = fc1·in, in = u (or p·u with probs on the input)     act = swiglu(pre)
//   out = fc2·(p·act) (or fc2·act with probs on the input)
#pragma once

#include "reference/bf16.hpp"
#include "reference/config.hpp"
#include "reference/swiglu.hpp"
#include "reference/tensor.hpp"

#include <optional>

namespace moe::definition {

// One SwiGLU expert on one token, with the routing probability p either after the activation (default,
// out = fc2·(p·act(fc1·u))) or on the input (out = fc2·act(fc1·(p·u)), k = 1 only).
template <typename T>
struct ExpertCall {
  const Matrix<T>& fc1;  // [2d, w]
  const Matrix<T>& fc2;  // [w, d]
  std::optional<double> clamp;
  bool clamp_limit_passes;  // the gradient at exactly ±L (MoeConfig::clamp_limit_passes)
  bool probs_on_input;
  bool bf16;  // pre and what fc2 multiplies are stored in bf16, and so are their gradients
};

// pre = fc1·in (in = p·u with probs on the input), stored.
template <typename T>
Vector<T> expert_pre(const ExpertCall<T>& f, const Vector<T>& u, T p) {
  return stored(f.bf16, f.probs_on_input ? Vector<T>(f.fc1 * (p * u)) : Vector<T>(f.fc1 * u));
}

template <typename T>
Vector<T> expert_forward(const ExpertCall<T>& f, const Vector<T>& u, T p) {
  const Vector<T> act = swiglu_activation<T>(expert_pre(f, u, p), f.clamp);
  return f.fc2 * stored(f.bf16, f.probs_on_input ? act : Vector<T>(p * act));
}

template <typename T>
struct ExpertBackward {
  Vector<T> output;      // the forward output, recomputed when asked (latent MoE: Σ outputs for grad latent_up;
                         // the shared expert's gate: its gradient), else empty
  Vector<T> grad_input;  // dL/du
  T grad_prob;           // dL/dp
};

// Accumulates dL/dfc1 and dL/dfc2 for upstream gradient `grad_out` = dL/d(out).
template <typename T>
ExpertBackward<T> expert_backward(const ExpertCall<T>& f, const Vector<T>& u, T p, const Vector<T>& grad_out,
                                  Matrix<T>& grad_fc1, Matrix<T>& grad_fc2, bool with_output) {
  const Vector<T> pre = expert_pre(f, u, p);
  const Vector<T> act = swiglu_activation<T>(pre, f.clamp);
  const T act_scale = f.probs_on_input ? T(1) : p;  // what multiplies act before fc2
  const Vector<T> scaled_act = stored(f.bf16, Vector<T>(act_scale * act));
  const Vector<T> grad_scaled_act = stored(f.bf16, Vector<T>(f.fc2.transpose() * grad_out));

  ExpertBackward<T> b;
  if (with_output) b.output = f.fc2 * scaled_act;
  grad_fc2.noalias() += grad_out * scaled_act.transpose();
  const Vector<T> grad_act = act_scale * grad_scaled_act;
  const Vector<T> grad_pre =
      stored(f.bf16, Vector<T>(swiglu_activation_backward<T>(pre, f.clamp, f.clamp_limit_passes, grad_act)));
  if (f.probs_on_input)
    grad_fc1.noalias() += grad_pre * (p * u).transpose();
  else
    grad_fc1.noalias() += grad_pre * u.transpose();
  const Vector<T> grad_in = f.fc1.transpose() * grad_pre;
  if (f.probs_on_input) {
    b.grad_input = p * grad_in;
    b.grad_prob = grad_in.dot(u);
  } else {
    b.grad_input = grad_in;
    b.grad_prob = act.dot(grad_scaled_act);
  }
  return b;
}

// A routed expert and the shared expert with their weights, as the config computes them (the per-token and the
// expert-batched forms both start here).
template <typename T>
ExpertCall<T> routed_call(const MoeConfig& c, const Matrix<T>& fc1, const Matrix<T>& fc2) {
  return {fc1, fc2, c.routed_clamp(), c.clamp_limit_passes(), c.apply_probs_on_input, c.bf16_storage};
}

template <typename T>
ExpertCall<T> shared_call(const MoeConfig& c, const Matrix<T>& fc1, const Matrix<T>& fc2) {
  return {fc1, fc2, c.shared_clamp(), c.clamp_limit_passes(), false, c.bf16_storage};
}

}  // namespace moe::definition
