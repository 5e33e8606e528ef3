#include "reference/moe_layer.hpp"

#include "reference/bf16.hpp"
#include "reference/expert_batched.hpp"
#include "reference/expert_bias.hpp"
#include "reference/fp8_quant.hpp"
#include "reference/router.hpp"
#include "reference/router_losses.hpp"
#include "reference/swiglu.hpp"

namespace moe {
namespace {

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

template <typename T>
ExpertCall<T> routed_expert(const MoeConfig& c, const MoeParams<T>& p, int e) {
  return {p.expert_fc1[static_cast<size_t>(e)], p.expert_fc2[static_cast<size_t>(e)], c.routed_clamp(),
          c.clamp_limit_passes(), c.apply_probs_on_input, c.bf16_storage};
}

template <typename T>
ExpertCall<T> shared_expert(const MoeConfig& c, const MoeParams<T>& p) {
  return {p.shared_fc1, p.shared_fc2, c.shared_clamp(), c.clamp_limit_passes(), false, c.bf16_storage};
}

// u = latent_down·x (latent MoE) or x: the rows the routed experts see, [T, w]; in FP8 with fp8_dispatch.
template <typename T>
Matrix<T> expert_inputs(const MoeConfig& c, const MoeParams<T>& p, const Matrix<T>& x) {
  Matrix<T> u = c.latent_size > 0 ? stored(c.bf16_storage, Matrix<T>(x * p.latent_down.transpose())) : x;
  return c.fp8_dispatch ? fp8_fake_quant_rows(u) : u;  // the backward passes through the quantisation
}

template <typename T>
T shared_gate_value(const MoeParams<T>& p, const Vector<T>& x) {
  return sigmoid<T>(p.shared_gate.row(0).dot(x));
}

template <typename T>
MoeGradients<T> zero_gradients(const MoeConfig& c, const MoeParams<T>& p, Eigen::Index tokens) {
  MoeGradients<T> g;
  g.x = Matrix<T>::Zero(tokens, c.hidden);
  g.params.router_weight = Matrix<T>::Zero(p.router_weight.rows(), p.router_weight.cols());
  for (size_t e = 0; e < p.expert_fc1.size(); ++e) {
    g.params.expert_fc1.push_back(Matrix<T>::Zero(p.expert_fc1[e].rows(), p.expert_fc1[e].cols()));
    g.params.expert_fc2.push_back(Matrix<T>::Zero(p.expert_fc2[e].rows(), p.expert_fc2[e].cols()));
  }
  g.params.shared_fc1 = Matrix<T>::Zero(p.shared_fc1.rows(), p.shared_fc1.cols());
  g.params.shared_fc2 = Matrix<T>::Zero(p.shared_fc2.rows(), p.shared_fc2.cols());
  g.params.shared_gate = Matrix<T>::Zero(p.shared_gate.rows(), p.shared_gate.cols());
  g.params.latent_down = Matrix<T>::Zero(p.latent_down.rows(), p.latent_down.cols());
  g.params.latent_up = Matrix<T>::Zero(p.latent_up.rows(), p.latent_up.cols());
  return g;
}

}  // namespace

ExpertPath parse_expert_path(std::string_view name) {
  if (name == "per-token") return ExpertPath::per_token;
  if (name == "expert-batched") return ExpertPath::expert_batched;
  throw std::invalid_argument("unknown oracle path '" + std::string(name) + "' (per-token, expert-batched)");
}

std::string_view to_string(ExpertPath path) {
  return path == ExpertPath::per_token ? "per-token" : "expert-batched";
}

template <typename T>
MoeForward<T> moe_forward(const MoeConfig& config, const MoeParams<T>& params, const MoeInputs<T>& inputs,
                          ExpertPath path) {
  validate_layer_inputs(config, params, inputs);
  MoeForward<T> f;
  f.routing = route(config, params, inputs);
  const Routing<T>& r = f.routing;
  const auto tokens = inputs.x.rows();

  // Routed branch: z_t = Σ_{e in routing map} F_e(u_t; p_{t,e}), padded slots included (p = 0).
  const Matrix<T> u = expert_inputs(config, params, inputs.x);
  Matrix<T> z = Matrix<T>::Zero(tokens, u.cols());
  if (path == ExpertPath::expert_batched) {
    routed_forward_batched(config, params, r, u, z);
  } else {
    for (Eigen::Index t = 0; t < tokens; ++t)
      for (int e = 0; e < config.num_experts; ++e)
        if (r.routing_map(t, e))
          z.row(t) += expert_forward<T>(routed_expert(config, params, e), u.row(t).transpose(), r.probs(t, e));
  }
  f.y = config.latent_size > 0 ? Matrix<T>(z * params.latent_up.transpose()) : z;

  if (config.has_shared_expert() && path == ExpertPath::expert_batched) {
    shared_forward_batched(config, params, inputs.x, f.y);
  } else if (config.has_shared_expert()) {
    for (Eigen::Index t = 0; t < tokens; ++t) {
      const Vector<T> x = inputs.x.row(t).transpose();
      const T gate = config.shared_expert_gate ? shared_gate_value(params, x) : T(1);
      f.y.row(t) += gate * expert_forward<T>(shared_expert(config, params), x, T(1)).transpose();
    }
  }
  f.y = stored(config.bf16_storage, std::move(f.y));

  f.global_aux = inputs.global_aux;
  if (config.aux_loss_type != AuxLossType::none) {
    const AuxLoss<T> aux = aux_loss(config, r, inputs);
    f.aux_loss = aux.value;
    f.aux_rows = aux.row_values;
    f.aux_counts = aux.counts;
    f.global_aux = aux.global_aux;
  }
  if (config.z_loss_coeff > 0) f.z_loss = z_loss(config, r.logits, inputs.padding_mask, inputs.partition).value;
  if (config.bias_update_rate) f.expert_bias_updated = updated_expert_bias(params.expert_bias, r.bias_counts,
                                                                           *config.bias_update_rate);
  return f;
}

template <typename T>
MoeGradients<T> moe_backward(const MoeConfig& config, const MoeParams<T>& params, const MoeInputs<T>& inputs,
                             const MoeForward<T>& forward, const Matrix<T>& grad_y, LossScales scales,
                             ExpertPath path) {
  validate_layer_inputs(config, params, inputs);
  const Routing<T>& r = forward.routing;
  const auto tokens = inputs.x.rows();
  if (grad_y.rows() != tokens || grad_y.cols() != config.hidden)
    throw std::invalid_argument("invalid MoE layer input: grad_y must have the shape of y");
  MoeGradients<T> g = zero_gradients(config, params, tokens);

  // Routed branch, in reverse: y ← latent_up·z, z ← Σ F_e(u).
  const Matrix<T> u = expert_inputs(config, params, inputs.x);
  const Matrix<T> grad_z = config.latent_size > 0 ? stored(config.bf16_storage, Matrix<T>(grad_y * params.latent_up)) : grad_y;
  Matrix<T> z = Matrix<T>::Zero(tokens, u.cols());
  Matrix<T> grad_u = Matrix<T>::Zero(tokens, u.cols());
  Matrix<T> grad_probs = Matrix<T>::Zero(tokens, config.num_experts);
  if (path == ExpertPath::expert_batched) {
    routed_backward_batched(config, params, r, u, grad_z, g.params, grad_u, grad_probs,
                            config.latent_size > 0 ? &z : nullptr);
  } else {
    for (Eigen::Index t = 0; t < tokens; ++t) {
      for (int e = 0; e < config.num_experts; ++e) {
        if (!r.routing_map(t, e)) continue;
        const auto b = expert_backward<T>(routed_expert(config, params, e), u.row(t).transpose(), r.probs(t, e),
                                          grad_z.row(t).transpose(), g.params.expert_fc1[static_cast<size_t>(e)],
                                          g.params.expert_fc2[static_cast<size_t>(e)], config.latent_size > 0);
        if (config.latent_size > 0) z.row(t) += b.output.transpose();
        grad_u.row(t) += b.grad_input.transpose();
        grad_probs(t, e) = b.grad_prob;
      }
    }
  }
  if (config.latent_size > 0) {
    g.params.latent_up = grad_y.transpose() * z;
    g.params.latent_down = grad_u.transpose() * inputs.x;
    g.x += grad_u * params.latent_down;
  } else {
    g.x += grad_u;
  }

  // Shared expert and its gate: y_t += γ_t·F_s(x_t), γ_t = σ(w_g·x_t).
  if (config.has_shared_expert() && path == ExpertPath::expert_batched) {
    shared_backward_batched(config, params, inputs.x, grad_y, g.params, g.x);
  } else if (config.has_shared_expert()) {
    for (Eigen::Index t = 0; t < tokens; ++t) {
      const Vector<T> x = inputs.x.row(t).transpose();
      const Vector<T> gy = grad_y.row(t).transpose();
      const T gate = config.shared_expert_gate ? shared_gate_value(params, x) : T(1);
      const auto b = expert_backward<T>(shared_expert(config, params), x, T(1), Vector<T>(gate * gy),
                                        g.params.shared_fc1, g.params.shared_fc2, config.shared_expert_gate);
      g.x.row(t) += b.grad_input.transpose();
      if (config.shared_expert_gate) {
        const T grad_gate_logit = gy.dot(b.output) * gate * (T(1) - gate);
        g.params.shared_gate.row(0) += grad_gate_logit * x.transpose();
        g.x.row(t) += grad_gate_logit * params.shared_gate.row(0);
      }
    }
  }

  // Router: through the weights, then the losses, into the logits l = x·W_gᵀ.
  Matrix<T> grad_logits = route_backward(config, r, grad_probs);
  if (config.aux_loss_type != AuxLossType::none) {
    Matrix<T> grad_aux = aux_loss(config, r, inputs).grad_logits;
    if (scales.aux_rows.empty()) {
      grad_aux *= static_cast<T>(scales.aux);
    } else {
      if (static_cast<Eigen::Index>(scales.aux_rows.size()) != tokens)
        throw std::invalid_argument("invalid MoE layer input: scales.aux_rows must have one entry per row");
      for (Eigen::Index t = 0; t < tokens; ++t) grad_aux.row(t) *= static_cast<T>(scales.aux_rows[static_cast<size_t>(t)]);
    }
    grad_logits += grad_aux;
  }
  if (config.z_loss_coeff > 0)
    grad_logits += static_cast<T>(scales.z) * z_loss(config, r.logits, inputs.padding_mask, inputs.partition).grad_logits;
  g.params.router_weight = grad_logits.transpose() * inputs.x;
  g.x += grad_logits * params.router_weight;
  g.x = stored(config.bf16_storage, std::move(g.x));
  return g;
}

template MoeForward<double> moe_forward<double>(const MoeConfig&, const MoeParams<double>&, const MoeInputs<double>&,
                                               ExpertPath);
template MoeForward<float> moe_forward<float>(const MoeConfig&, const MoeParams<float>&, const MoeInputs<float>&,
                                             ExpertPath);
template MoeGradients<double> moe_backward<double>(const MoeConfig&, const MoeParams<double>&,
                                                   const MoeInputs<double>&, const MoeForward<double>&,
                                                   const Matrix<double>&, LossScales, ExpertPath);
template MoeGradients<float> moe_backward<float>(const MoeConfig&, const MoeParams<float>&, const MoeInputs<float>&,
                                                 const MoeForward<float>&, const Matrix<float>&, LossScales,
                                                 ExpertPath);

}  // namespace moe
