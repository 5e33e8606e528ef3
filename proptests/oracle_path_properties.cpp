// The oracle's two ways of computing the experts (reference/moe_layer.hpp, ExpertPath) are the same function: on
// every layer of every generated model — each score function, clamp, shared expert and gate, latent MoE,
// probabilities on the input, capacity, hash layers, bf16 storage — the expert-batched path's forward and backward
// agree with the per-token definition within the layer tolerance (reassociation only).
#include <rapidcheck.h>

#include <sstream>

#include "proptests/generators.hpp"
#include "proptests/property.hpp"
#include "reference/moe_layer.hpp"
#include "reference/random_init.hpp"
#include "reference/tolerance.hpp"

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

}  // namespace moe::proptest
