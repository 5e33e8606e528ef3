// The oracle's two ways of computing the experts (reference/moe_layer.hpp, ExpertPath) are the same function: on
// every layer of every generated model — each score function, clamp, shared expert and gate, latent MoE,
// probabilities on the input, capacity, hash layers, bf16 storage — the expert-batched path's forward and backward
// agree with the per-token definition within the layer tolerance (reassociation only). And on either path, the layer
// with its routed experts supplied one at a time from outside (what compare does with a dump's experts:
// routed_expert_forward / routed_expert_backward between finish_forward / finish_backward) is bit for bit the layer.
#include <rapidcheck.h>

#include <cmath>
#include <ostream>
#include <sstream>
#include <vector>

#include "proptests/generators.hpp"
#include "proptests/property.hpp"
#include "reference/expert_batched.hpp"
#include "reference/moe_layer.hpp"
#include "reference/random_init.hpp"
#include "reference/router.hpp"
#include "reference/tolerance.hpp"

namespace moe {
// So that a counterexample names its path (RapidCheck prints what has an operator<<).
inline std::ostream& operator<<(std::ostream& os, ExpertPath path) { return os << to_string(path); }
}  // namespace moe

namespace moe::proptest {
namespace {

// RC_ASSERT with the tensor's name, first differing index and both values.
void require_close(const std::string& what, const Matrix<double>& got, const Matrix<double>& want, const Tolerance& tol) {
  RC_ASSERT(got.rows() == want.rows() && got.cols() == want.cols());
  for (Eigen::Index i = 0; i < got.size(); ++i) {
    if (tol.admits(got.data()[i], want.data()[i])) continue;
    std::ostringstream s;
    s.precision(17);
    s << what << "[" << i << "]: expert-batched " << got.data()[i] << ", per-token " << want.data()[i];
    RC_FAIL(s.str());
  }
}

Matrix<double> scalar(double v) { return Matrix<double>::Constant(1, 1, v); }

// RC_ASSERT that two results are the same bits (both come from the same functions in the same order).
void require_same(const std::string& what, const Matrix<double>& got, const Matrix<double>& want) {
  RC_ASSERT(got.rows() == want.rows() && got.cols() == want.cols());
  for (Eigen::Index i = 0; i < got.size(); ++i) {
    if (got.data()[i] == want.data()[i] || (std::isnan(got.data()[i]) && std::isnan(want.data()[i]))) continue;
    std::ostringstream s;
    s.precision(17);
    s << what << "[" << i << "]: experts streamed " << got.data()[i] << ", the layer " << want.data()[i];
    RC_FAIL(s.str());
  }
}

// One layer call with its routed experts streamed: the parameters without them, each expert's weights handed to
// routed_expert_forward / routed_expert_backward over its rows, the rest by finish_forward / finish_backward.
struct Streamed {
  MoeForward<double> forward;
  MoeGradients<double> grads;
  std::vector<Matrix<double>> fc1, fc2;  // the experts' gradients
};

Streamed stream_experts(const MoeConfig& c, const MoeParams<double>& params, const MoeInputs<double>& in,
                        const Matrix<double>& dy, ExpertPath path) {
  MoeParams<double> rest = params;
  rest.expert_fc1.clear();
  rest.expert_fc2.clear();
  Routing<double> r = route(c, rest, in);
  const Matrix<double> u = routed_inputs(c, rest, in.x), grad_z = routed_output_grad(c, rest, dy);
  Matrix<double> z = Matrix<double>::Zero(u.rows(), u.cols());
  RoutedBackward<double> routed{Matrix<double>::Zero(u.rows(), u.cols()), Matrix<double>::Zero(u.rows(), c.num_experts),
                                Matrix<double>::Zero(c.latent_size > 0 ? u.rows() : 0, u.cols())};
  Streamed s;
  for (int e = 0; e < c.num_experts; ++e) {
    const Matrix<double>& fc1 = params.expert_fc1[static_cast<size_t>(e)];
    const Matrix<double>& fc2 = params.expert_fc2[static_cast<size_t>(e)];
    std::vector<Eigen::Index> rows;
    for (Eigen::Index t = 0; t < u.rows(); ++t)
      if (r.routing_map(t, e)) rows.push_back(t);
    const auto n = static_cast<Eigen::Index>(rows.size());
    Matrix<double> ue(n, u.cols()), ge(n, u.cols());
    Vector<double> pe(n);
    for (Eigen::Index i = 0; i < n; ++i) {
      ue.row(i) = u.row(rows[static_cast<size_t>(i)]);
      ge.row(i) = grad_z.row(rows[static_cast<size_t>(i)]);
      pe(i) = r.probs(rows[static_cast<size_t>(i)], e);
    }
    s.fc1.push_back(Matrix<double>::Zero(fc1.rows(), fc1.cols()));
    s.fc2.push_back(Matrix<double>::Zero(fc2.rows(), fc2.cols()));
    if (n == 0) continue;
    const Matrix<double> out = routed_expert_forward(c, fc1, fc2, ue, pe, path);
    const auto b = routed_expert_backward(c, fc1, fc2, ue, pe, ge, s.fc1.back(), s.fc2.back(), c.latent_size > 0, path);
    for (Eigen::Index i = 0; i < n; ++i) {
      const Eigen::Index t = rows[static_cast<size_t>(i)];
      z.row(t) += out.row(i);
      if (c.latent_size > 0) routed.z.row(t) += b.output.row(i);
      routed.grad_u.row(t) += b.grad_input.row(i);
      routed.grad_probs(t, e) = b.grad_prob(i);
    }
  }
  s.forward = finish_forward(c, rest, in, std::move(r), z, path);
  s.grads = finish_backward(c, rest, in, s.forward, dy, {}, routed, path);
  return s;
}

}  // namespace

MOE_PROPERTY(Oracle, ExpertBatchedMatchesPerToken, 150, ()) {
  const Scenario s = *scenarios();
  const Tolerance tol = tolerance(Compared::layer, Precision::float64);
  const int batch = s.options.micro_batch;
  for (int l = 0; l < s.config.num_layers; ++l) {
    const MoeConfig c = s.config.layer_config(l);
    const auto params = random_params<double>(c, s.config.vocab, s.param_seed + static_cast<std::uint64_t>(l));
    const auto in = random_inputs<double>(c, s.seq, batch, s.config.vocab, s.batch_seed + static_cast<std::uint64_t>(l));
    const auto dy = random_grad_y<double>(c, s.seq * batch, s.batch_seed + 100 + static_cast<std::uint64_t>(l));
    const auto f_token = moe_forward(c, params, in, ExpertPath::per_token);
    const auto f_batch = moe_forward(c, params, in, ExpertPath::expert_batched);
    const std::string at = "layer " + std::to_string(l) + " ";
    require_close(at + "y", f_batch.y, f_token.y, tol);
    require_close(at + "aux", scalar(f_batch.aux_loss), scalar(f_token.aux_loss), tol);
    const auto g_token = moe_backward(c, params, in, f_token, dy, {}, ExpertPath::per_token);
    const auto g_batch = moe_backward(c, params, in, f_batch, dy, {}, ExpertPath::expert_batched);
    require_close(at + "dx", g_batch.x, g_token.x, tol);
    require_close(at + "router", g_batch.params.router_weight, g_token.params.router_weight, tol);
    for (size_t e = 0; e < g_token.params.expert_fc1.size(); ++e) {
      require_close(at + "fc1 of expert " + std::to_string(e), g_batch.params.expert_fc1[e], g_token.params.expert_fc1[e], tol);
      require_close(at + "fc2 of expert " + std::to_string(e), g_batch.params.expert_fc2[e], g_token.params.expert_fc2[e], tol);
    }
    require_close(at + "shared fc1", g_batch.params.shared_fc1, g_token.params.shared_fc1, tol);
    require_close(at + "shared fc2", g_batch.params.shared_fc2, g_token.params.shared_fc2, tol);
    require_close(at + "shared gate", g_batch.params.shared_gate, g_token.params.shared_gate, tol);
    require_close(at + "latent down", g_batch.params.latent_down, g_token.params.latent_down, tol);
    require_close(at + "latent up", g_batch.params.latent_up, g_token.params.latent_up, tol);
  }
}

MOE_PROPERTY(Oracle, StreamedExpertsAreTheLayer, 100, ()) {
  const Scenario s = *scenarios();
  const int batch = s.options.micro_batch;
  const ExpertPath path = *rc::gen::element(ExpertPath::per_token, ExpertPath::expert_batched);
  for (int l = 0; l < s.config.num_layers; ++l) {
    const MoeConfig c = s.config.layer_config(l);
    const auto layer = static_cast<std::uint64_t>(l);
    const auto params = random_params<double>(c, s.config.vocab, s.param_seed + layer);
    const auto in = random_inputs<double>(c, s.seq, batch, s.config.vocab, s.batch_seed + layer);
    const auto dy = random_grad_y<double>(c, s.seq * batch, s.batch_seed + 100 + layer);
    const auto f = moe_forward(c, params, in, path);
    const auto g = moe_backward(c, params, in, f, dy, {}, path);
    const Streamed st = stream_experts(c, params, in, dy, path);
    const std::string at = "layer " + std::to_string(l) + " (" + std::string(to_string(path)) + ") ";
    require_same(at + "y", st.forward.y, f.y);
    require_same(at + "aux", scalar(st.forward.aux_loss), scalar(f.aux_loss));
    require_same(at + "z loss", scalar(st.forward.z_loss), scalar(f.z_loss));
    require_same(at + "dx", st.grads.x, g.x);
    require_same(at + "router", st.grads.params.router_weight, g.params.router_weight);
    for (size_t e = 0; e < g.params.expert_fc1.size(); ++e) {
      require_same(at + "fc1 of expert " + std::to_string(e), st.fc1[e], g.params.expert_fc1[e]);
      require_same(at + "fc2 of expert " + std::to_string(e), st.fc2[e], g.params.expert_fc2[e]);
    }
    require_same(at + "shared fc1", st.grads.params.shared_fc1, g.params.shared_fc1);
    require_same(at + "shared fc2", st.grads.params.shared_fc2, g.params.shared_fc2);
    require_same(at + "shared gate", st.grads.params.shared_gate, g.params.shared_gate);
    require_same(at + "latent down", st.grads.params.latent_down, g.params.latent_down);
    require_same(at + "latent up", st.grads.params.latent_up, g.params.latent_up);
  }
}

}  // namespace moe::proptest
