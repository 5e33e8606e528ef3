#include "reference/expert_batched.hpp"

#include "reference/bf16.hpp"
#include "reference/expert_definition.hpp"
#include "reference/score_functions.hpp"
#include "reference/swiglu.hpp"

#include <stdexcept>
#include <string>
#include <vector>

namespace moe {
namespace {

// The rows routed to expert e, in rising t.
template <typename T>
std::vector<Eigen::Index> rows_of(const Routing<T>& r, int e) {
  std::vector<Eigen::Index> rows;
  for (Eigen::Index t = 0; t < r.routing_map.rows(); ++t)
    if (r.routing_map(t, e)) rows.push_back(t);
  return rows;
}

template <typename T>
Matrix<T> gather(const Matrix<T>& m, const std::vector<Eigen::Index>& rows) {
  Matrix<T> out(static_cast<Eigen::Index>(rows.size()), m.cols());
  for (size_t i = 0; i < rows.size(); ++i) out.row(static_cast<Eigen::Index>(i)) = m.row(rows[i]);
  return out;
}

// swiglu_activation (and its backward) row by row: the per-token functions themselves, so the elementwise
// formulas cannot drift apart.
template <typename T>
Matrix<T> activation_rows(const Matrix<T>& pre, std::optional<double> clamp) {
  Matrix<T> act(pre.rows(), pre.cols() / 2);
  for (Eigen::Index i = 0; i < pre.rows(); ++i)
    act.row(i) = swiglu_activation<T>(pre.row(i).transpose(), clamp).transpose();
  return act;
}

template <typename T>
Matrix<T> activation_backward_rows(const Matrix<T>& pre, std::optional<double> clamp, bool limit_passes,
                                   const Matrix<T>& grad_act) {
  Matrix<T> grad_pre(pre.rows(), pre.cols());
  for (Eigen::Index i = 0; i < pre.rows(); ++i)
    grad_pre.row(i) =
        swiglu_activation_backward<T>(pre.row(i).transpose(), clamp, limit_passes, grad_act.row(i).transpose())
            .transpose();
  return grad_pre;
}

// One expert (routed or shared) over a block of rows: what the per-token ExpertCall computes, for n rows at once
// (the same weights and settings: definition::routed_call / shared_call).
template <typename T>
struct ExpertBlock : definition::ExpertCall<T> {
  using definition::ExpertCall<T>::fc1;
  using definition::ExpertCall<T>::fc2;
  using definition::ExpertCall<T>::clamp;
  using definition::ExpertCall<T>::clamp_limit_passes;
  using definition::ExpertCall<T>::probs_on_input;
  using definition::ExpertCall<T>::bf16;

  // The expert's input rows: p ⊙ U with probs on the input, else U.
  Matrix<T> input(const Matrix<T>& u, const Vector<T>& p) const {
    return probs_on_input ? Matrix<T>(p.asDiagonal() * u) : u;
  }
  Matrix<T> pre(const Matrix<T>& in) const { return stored(bf16, Matrix<T>(in * fc1.transpose())); }
  // What multiplies the activation before fc2: p (probs after the activation) or 1.
  Vector<T> act_scale(const Vector<T>& p) const { return probs_on_input ? Vector<T>::Ones(p.size()) : p; }

  Matrix<T> forward(const Matrix<T>& u, const Vector<T>& p) const {
    const Matrix<T> act = activation_rows<T>(pre(input(u, p)), clamp);
    return stored(bf16, Matrix<T>(act_scale(p).asDiagonal() * act)) * fc2.transpose();
  }

  struct Backward {
    Matrix<T> output;      // [n, w] the forward's output, when asked
    Matrix<T> grad_input;  // [n, w] dL/du
    Vector<T> grad_prob;   // [n] dL/dp
  };

  Backward backward(const Matrix<T>& u, const Vector<T>& p, const Matrix<T>& grad_out, Matrix<T>& grad_fc1,
                    Matrix<T>& grad_fc2, bool with_output) const {
    const Matrix<T> in = input(u, p);
    const Matrix<T> pre_rows = pre(in);
    const Matrix<T> act = activation_rows<T>(pre_rows, clamp);
    const Vector<T> scale = act_scale(p);
    const Matrix<T> scaled_act = stored(bf16, Matrix<T>(scale.asDiagonal() * act));
    const Matrix<T> grad_scaled_act = stored(bf16, Matrix<T>(grad_out * fc2));
    Backward b;
    if (with_output) b.output = scaled_act * fc2.transpose();
    grad_fc2.noalias() += grad_out.transpose() * scaled_act;
    const Matrix<T> grad_act = scale.asDiagonal() * grad_scaled_act;
    const Matrix<T> grad_pre = stored(bf16, activation_backward_rows<T>(pre_rows, clamp, clamp_limit_passes, grad_act));
    grad_fc1.noalias() += grad_pre.transpose() * in;
    const Matrix<T> grad_in = grad_pre * fc1;
    if (probs_on_input) {
      b.grad_input = p.asDiagonal() * grad_in;
      b.grad_prob = grad_in.cwiseProduct(u).rowwise().sum();
    } else {
      b.grad_input = grad_in;
      b.grad_prob = act.cwiseProduct(grad_scaled_act).rowwise().sum();
    }
    return b;
  }
};

template <typename T>
ExpertBlock<T> routed_block(const MoeConfig& c, const MoeParams<T>& p, int e) {
  return {definition::routed_call(c, p.expert_fc1[static_cast<size_t>(e)], p.expert_fc2[static_cast<size_t>(e)])};
}

template <typename T>
ExpertBlock<T> shared_block(const MoeConfig& c, const MoeParams<T>& p) {
  return {definition::shared_call(c, p.shared_fc1, p.shared_fc2)};
}

template <typename T>
Vector<T> probs_of(const Routing<T>& r, const std::vector<Eigen::Index>& rows, int e) {
  Vector<T> v(static_cast<Eigen::Index>(rows.size()));
  for (size_t i = 0; i < rows.size(); ++i) v(static_cast<Eigen::Index>(i)) = r.probs(rows[i], e);
  return v;
}

// γ_t = σ(w_g·x_t) for every row (the shared expert's gate), or empty without it.
template <typename T>
Vector<T> gate_values(const MoeConfig& c, const MoeParams<T>& p, const Matrix<T>& x) {
  if (!c.shared_expert_gate) return {};
  Vector<T> gate(x.rows());
  for (Eigen::Index t = 0; t < x.rows(); ++t) gate(t) = sigmoid<T>(p.shared_gate.row(0).dot(x.row(t)));
  return gate;
}

// The shapes one expert's call needs, named in the message of the first that does not hold.
template <typename T>
void require_expert_rows(const MoeConfig& c, const Matrix<T>& fc1, const Matrix<T>& fc2, const Matrix<T>& u,
                         const Vector<T>& probs, const Matrix<T>* grad_out) {
  const Eigen::Index d = c.ffn_hidden, w = c.expert_width();
  const auto require = [](bool ok, const std::string& rule) {
    if (!ok) throw std::invalid_argument("invalid routed expert call: " + rule);
  };
  require(fc1.rows() == 2 * d && fc1.cols() == w, "fc1 must be [2d, w] = [" + std::to_string(2 * d) + ", " +
                                                      std::to_string(w) + "]");
  require(fc2.rows() == w && fc2.cols() == d, "fc2 must be [w, d] = [" + std::to_string(w) + ", " +
                                                  std::to_string(d) + "]");
  require(u.cols() == w && probs.size() == u.rows(), "u must be [n, w] with one probability per row");
  require(grad_out == nullptr || (grad_out->rows() == u.rows() && grad_out->cols() == w),
          "grad_out must have the shape of u");
}

}  // namespace

template <typename T>
Matrix<T> routed_expert_forward(const MoeConfig& c, const Matrix<T>& fc1, const Matrix<T>& fc2, const Matrix<T>& u,
                                const Vector<T>& probs, ExpertPath path) {
  require_expert_rows<T>(c, fc1, fc2, u, probs, nullptr);
  const auto call = definition::routed_call(c, fc1, fc2);
  if (path == ExpertPath::expert_batched) return ExpertBlock<T>{call}.forward(u, probs);
  Matrix<T> out(u.rows(), u.cols());
  for (Eigen::Index i = 0; i < u.rows(); ++i)
    out.row(i) = definition::expert_forward<T>(call, u.row(i).transpose(), probs(i)).transpose();
  return out;
}

template <typename T>
RoutedExpertBackward<T> routed_expert_backward(const MoeConfig& c, const Matrix<T>& fc1, const Matrix<T>& fc2,
                                               const Matrix<T>& u, const Vector<T>& probs, const Matrix<T>& grad_out,
                                               Matrix<T>& grad_fc1, Matrix<T>& grad_fc2, bool with_output,
                                               ExpertPath path) {
  require_expert_rows(c, fc1, fc2, u, probs, &grad_out);
  if (grad_fc1.rows() != fc1.rows() || grad_fc1.cols() != fc1.cols() || grad_fc2.rows() != fc2.rows() ||
      grad_fc2.cols() != fc2.cols())
    throw std::invalid_argument("invalid routed expert call: the gradients must have the weights' shapes");
  RoutedExpertBackward<T> out;
  const auto call = definition::routed_call(c, fc1, fc2);
  if (path == ExpertPath::expert_batched) {
    auto b = ExpertBlock<T>{call}.backward(u, probs, grad_out, grad_fc1, grad_fc2, with_output);
    out.output = std::move(b.output);
    out.grad_input = std::move(b.grad_input);
    out.grad_prob = std::move(b.grad_prob);
    return out;
  }
  out.grad_input.resize(u.rows(), u.cols());
  out.grad_prob.resize(u.rows());
  if (with_output) out.output.resize(u.rows(), u.cols());
  for (Eigen::Index i = 0; i < u.rows(); ++i) {
    const auto b = definition::expert_backward<T>(call, u.row(i).transpose(), probs(i), grad_out.row(i).transpose(),
                                                  grad_fc1, grad_fc2, with_output);
    if (with_output) out.output.row(i) = b.output.transpose();
    out.grad_input.row(i) = b.grad_input.transpose();
    out.grad_prob(i) = b.grad_prob;
  }
  return out;
}

template <typename T>
void routed_forward_batched(const MoeConfig& c, const MoeParams<T>& p, const Routing<T>& r, const Matrix<T>& u,
                            Matrix<T>& z) {
  for (int e = 0; e < c.num_experts; ++e) {
    const std::vector<Eigen::Index> rows = rows_of(r, e);
    if (rows.empty()) continue;
    const Matrix<T> out = routed_block(c, p, e).forward(gather(u, rows), probs_of(r, rows, e));
    for (size_t i = 0; i < rows.size(); ++i) z.row(rows[i]) += out.row(static_cast<Eigen::Index>(i));
  }
}

template <typename T>
void routed_backward_batched(const MoeConfig& c, const MoeParams<T>& p, const Routing<T>& r, const Matrix<T>& u,
                             const Matrix<T>& grad_z, MoeParams<T>& g, Matrix<T>& grad_u, Matrix<T>& grad_probs,
                             Matrix<T>* z) {
  for (int e = 0; e < c.num_experts; ++e) {
    const std::vector<Eigen::Index> rows = rows_of(r, e);
    if (rows.empty()) continue;
    const auto b = routed_block(c, p, e).backward(gather(u, rows), probs_of(r, rows, e), gather(grad_z, rows),
                                                  g.expert_fc1[static_cast<size_t>(e)],
                                                  g.expert_fc2[static_cast<size_t>(e)], z != nullptr);
    for (size_t i = 0; i < rows.size(); ++i) {
      const auto k = static_cast<Eigen::Index>(i);
      if (z) z->row(rows[i]) += b.output.row(k);
      grad_u.row(rows[i]) += b.grad_input.row(k);
      grad_probs(rows[i], e) = b.grad_prob(k);
    }
  }
}

template <typename T>
void shared_forward_batched(const MoeConfig& c, const MoeParams<T>& p, const Matrix<T>& x, Matrix<T>& y) {
  const Matrix<T> out = shared_block(c, p).forward(x, Vector<T>::Ones(x.rows()));
  const Vector<T> gate = gate_values(c, p, x);
  if (c.shared_expert_gate) y.noalias() += gate.asDiagonal() * out;
  else y += out;
}

template <typename T>
void shared_backward_batched(const MoeConfig& c, const MoeParams<T>& p, const Matrix<T>& x, const Matrix<T>& grad_y,
                             MoeParams<T>& g, Matrix<T>& grad_x) {
  const Vector<T> gate = gate_values(c, p, x);
  const Matrix<T> grad_out = c.shared_expert_gate ? Matrix<T>(gate.asDiagonal() * grad_y) : grad_y;
  const auto b = shared_block(c, p).backward(x, Vector<T>::Ones(x.rows()), grad_out, g.shared_fc1, g.shared_fc2,
                                             c.shared_expert_gate);
  grad_x += b.grad_input;
  if (c.shared_expert_gate) {
    // dL/d(gate logit)_t = ⟨dy_t, F_s(x_t)⟩·γ_t(1 − γ_t)
    const Vector<T> grad_logit =
        grad_y.cwiseProduct(b.output).rowwise().sum().cwiseProduct(gate).cwiseProduct((Vector<T>::Ones(gate.size()) - gate));
    g.shared_gate.row(0) += grad_logit.transpose() * x;
    grad_x.noalias() += grad_logit * p.shared_gate.row(0);
  }
}

#define MOE_EXPERT_BATCHED(T)                                                                                          \
  template void routed_forward_batched<T>(const MoeConfig&, const MoeParams<T>&, const Routing<T>&, const Matrix<T>&, \
                                          Matrix<T>&);                                                                 \
  template void routed_backward_batched<T>(const MoeConfig&, const MoeParams<T>&, const Routing<T>&,                  \
                                           const Matrix<T>&, const Matrix<T>&, MoeParams<T>&, Matrix<T>&, Matrix<T>&, \
                                           Matrix<T>*);                                                                \
  template void shared_forward_batched<T>(const MoeConfig&, const MoeParams<T>&, const Matrix<T>&, Matrix<T>&);       \
  template void shared_backward_batched<T>(const MoeConfig&, const MoeParams<T>&, const Matrix<T>&, const Matrix<T>&, \
                                           MoeParams<T>&, Matrix<T>&);                                                 \
  template Matrix<T> routed_expert_forward<T>(const MoeConfig&, const Matrix<T>&, const Matrix<T>&, const Matrix<T>&, \
                                              const Vector<T>&, ExpertPath);                                           \
  template RoutedExpertBackward<T> routed_expert_backward<T>(const MoeConfig&, const Matrix<T>&, const Matrix<T>&,    \
                                                             const Matrix<T>&, const Vector<T>&, const Matrix<T>&,    \
                                                             Matrix<T>&, Matrix<T>&, bool, ExpertPath);
MOE_EXPERT_BATCHED(double)
MOE_EXPERT_BATCHED(float)
#undef MOE_EXPERT_BATCHED

}  // namespace moe
