#include "reference/moe_layer.hpp"

#include "reference/expert_path_names.hpp"

#include "reference/bf16.hpp"
#include "reference/expert_batched.hpp"
#include "reference/expert_bias.hpp"
#include "reference/expert_definition.hpp"
#include "reference/fp8_quant.hpp"
#include "reference/router.hpp"
#include "reference/router_losses.hpp"
#include "reference/swiglu.hpp"

namespace moe {
namespace {

using definition::ExpertCall;
using definition::expert_backward;
using definition::expert_forward;

template <typename T>
ExpertCall<T> routed_expert(const MoeConfig& c, const MoeParams<T>& p, int e) {
  return definition::routed_call(c, p.expert_fc1[static_cast<size_t>(e)], p.expert_fc2[static_cast<size_t>(e)]);
}

template <typename T>
ExpertCall<T> shared_expert(const MoeConfig& c, const MoeParams<T>& p) {
  return definition::shared_call(c, p.shared_fc1, p.shared_fc2);
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

// The layer after its routed experts: y from z, the shared expert, the losses and the bias update.
template <typename T>
MoeForward<T> forward_after_experts(const MoeConfig& config, const MoeParams<T>& params, const MoeInputs<T>& inputs,
                                    Routing<T> routing, const Matrix<T>& z, ExpertPath path) {
  MoeForward<T> f;
  f.routing = std::move(routing);
  const Routing<T>& r = f.routing;
  const auto tokens = inputs.x.rows();
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

// The backward after the routed experts have added their weight gradients into `g` and given dL/du and
// dL/dprobs: the latent projections, the shared expert and its gate, the router through its weights and losses.
template <typename T>
MoeGradients<T> backward_after_experts(const MoeConfig& config, const MoeParams<T>& params, const MoeInputs<T>& inputs,
                                       const MoeForward<T>& forward, const Matrix<T>& grad_y, const LossScales& scales,
                                       const RoutedBackward<T>& routed, ExpertPath path, MoeGradients<T> g) {
  const Routing<T>& r = forward.routing;
  const auto tokens = inputs.x.rows();
  if (config.latent_size > 0) {
    g.params.latent_up = grad_y.transpose() * routed.z;
    g.params.latent_down = routed.grad_u.transpose() * inputs.x;
    g.x += routed.grad_u * params.latent_down;
  } else {
    g.x += routed.grad_u;
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
  Matrix<T> grad_logits = route_backward(config, r, routed.grad_probs);
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

void require_rows(bool ok, const char* what) {
  if (!ok) throw std::invalid_argument(std::string("invalid MoE layer input: ") + what);
}

}  // namespace

ExpertPath parse_expert_path(std::string_view name) { return parse_named<ExpertPath>(name, "oracle path"); }

std::string_view to_string(ExpertPath path) { return name_of(path); }

template <typename T>
Matrix<T> routed_inputs(const MoeConfig& config, const MoeParams<T>& params, const Matrix<T>& x) {
  return expert_inputs(config, params, x);
}

template <typename T>
Matrix<T> routed_output_grad(const MoeConfig& config, const MoeParams<T>& params, const Matrix<T>& grad_y) {
  return config.latent_size > 0 ? stored(config.bf16_storage, Matrix<T>(grad_y * params.latent_up)) : grad_y;
}

template <typename T>
MoeForward<T> moe_forward(const MoeConfig& config, const MoeParams<T>& params, const MoeInputs<T>& inputs,
                          ExpertPath path) {
  validate_layer_inputs(config, params, inputs);
  Routing<T> r = route(config, params, inputs);
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
  return forward_after_experts(config, params, inputs, std::move(r), z, path);
}

template <typename T>
MoeForward<T> finish_forward(const MoeConfig& config, const MoeParams<T>& params, const MoeInputs<T>& inputs,
                             Routing<T> routing, const Matrix<T>& z, ExpertPath path) {
  validate_layer_inputs(config, params, inputs, RoutedWeights::streamed);
  require_rows(routing.routing_map.rows() == inputs.x.rows() && routing.routing_map.cols() == config.num_experts,
               "the routing must be the routing of these inputs");
  require_rows(z.rows() == inputs.x.rows() && z.cols() == config.expert_width(), "z must be [tokens, expert width]");
  return forward_after_experts(config, params, inputs, std::move(routing), z, path);
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
  const Matrix<T> grad_z = routed_output_grad(config, params, grad_y);
  RoutedBackward<T> routed;
  routed.z = Matrix<T>::Zero(config.latent_size > 0 ? tokens : 0, u.cols());
  routed.grad_u = Matrix<T>::Zero(tokens, u.cols());
  routed.grad_probs = Matrix<T>::Zero(tokens, config.num_experts);
  if (path == ExpertPath::expert_batched) {
    routed_backward_batched(config, params, r, u, grad_z, g.params, routed.grad_u, routed.grad_probs,
                            config.latent_size > 0 ? &routed.z : nullptr);
  } else {
    for (Eigen::Index t = 0; t < tokens; ++t) {
      for (int e = 0; e < config.num_experts; ++e) {
        if (!r.routing_map(t, e)) continue;
        const auto b = expert_backward<T>(routed_expert(config, params, e), u.row(t).transpose(), r.probs(t, e),
                                          grad_z.row(t).transpose(), g.params.expert_fc1[static_cast<size_t>(e)],
                                          g.params.expert_fc2[static_cast<size_t>(e)], config.latent_size > 0);
        if (config.latent_size > 0) routed.z.row(t) += b.output.transpose();
        routed.grad_u.row(t) += b.grad_input.transpose();
        routed.grad_probs(t, e) = b.grad_prob;
      }
    }
  }
  return backward_after_experts(config, params, inputs, forward, grad_y, scales, routed, path, std::move(g));
}

template <typename T>
MoeGradients<T> finish_backward(const MoeConfig& config, const MoeParams<T>& params, const MoeInputs<T>& inputs,
                                const MoeForward<T>& forward, const Matrix<T>& grad_y, const LossScales& scales,
                                const RoutedBackward<T>& routed, ExpertPath path) {
  validate_layer_inputs(config, params, inputs, RoutedWeights::streamed);
  const auto tokens = inputs.x.rows();
  require_rows(grad_y.rows() == tokens && grad_y.cols() == config.hidden, "grad_y must have the shape of y");
  require_rows(forward.routing.routing_map.rows() == tokens, "the forward must be the forward of these inputs");
  require_rows(routed.grad_u.rows() == tokens && routed.grad_u.cols() == config.expert_width(),
               "grad_u must be [tokens, expert width]");
  require_rows(routed.grad_probs.rows() == tokens && routed.grad_probs.cols() == config.num_experts,
               "grad_probs must be [tokens, E]");
  require_rows(config.latent_size == 0 || (routed.z.rows() == tokens && routed.z.cols() == config.expert_width()),
               "z must be [tokens, expert width] for a latent layer");
  return backward_after_experts(config, params, inputs, forward, grad_y, scales, routed, path,
                                zero_gradients(config, params, tokens));
}

#define MOE_LAYER(T)                                                                                                   \
  template Matrix<T> routed_inputs<T>(const MoeConfig&, const MoeParams<T>&, const Matrix<T>&);                       \
  template Matrix<T> routed_output_grad<T>(const MoeConfig&, const MoeParams<T>&, const Matrix<T>&);                  \
  template MoeForward<T> moe_forward<T>(const MoeConfig&, const MoeParams<T>&, const MoeInputs<T>&, ExpertPath);      \
  template MoeForward<T> finish_forward<T>(const MoeConfig&, const MoeParams<T>&, const MoeInputs<T>&, Routing<T>,     \
                                           const Matrix<T>&, ExpertPath);                                              \
  template MoeGradients<T> moe_backward<T>(const MoeConfig&, const MoeParams<T>&, const MoeInputs<T>&,                \
                                           const MoeForward<T>&, const Matrix<T>&, LossScales, ExpertPath);            \
  template MoeGradients<T> finish_backward<T>(const MoeConfig&, const MoeParams<T>&, const MoeInputs<T>&,             \
                                              const MoeForward<T>&, const Matrix<T>&, const LossScales&,               \
                                              const RoutedBackward<T>&, ExpertPath);
MOE_LAYER(double)
MOE_LAYER(float)
#undef MOE_LAYER

}  // namespace moe
