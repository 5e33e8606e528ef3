// The device router against dist::route_local / route_local_backward for every score function, expert bias,
// group-limited and hash routing, both normalisations; dyadic inputs make the logits exact so ties stay ties and
// the stable tie rule is exercised.
#include "cuda/device_router.hpp"
#include "cuda/tests/gpu_test.hpp"
#include "distributed/train/local_router.hpp"

#include <string>

namespace moe::cuda {
namespace {

using namespace testing;

struct Case {
  std::string name;
  MoeConfig config;
};

MoeConfig base(ScoreFunction f, int experts, int k) {
  MoeConfig c;
  c.hidden = 24;
  c.num_experts = experts;
  c.topk = k;
  c.ffn_hidden = 8;
  c.score_function = f;
  c.topk_scaling_factor = 2.5;
  return c;
}

std::vector<Case> cases() {
  std::vector<Case> out;
  out.push_back({"softmax_post_k2", base(ScoreFunction::softmax, 8, 2)});
  auto pre = base(ScoreFunction::softmax, 40, 3);
  pre.pre_softmax = true;
  out.push_back({"softmax_pre_k3_e40", pre});
  auto groups = base(ScoreFunction::sigmoid, 16, 4);
  groups.expert_bias = true;
  groups.num_groups = 4;
  groups.group_topk = 2;
  out.push_back({"sigmoid_bias_groups", groups});
  auto deepseek = base(ScoreFunction::sqrtsoftplus, 64, 6);
  deepseek.normalization = Normalization::deepseek;
  deepseek.expert_bias = true;
  out.push_back({"sqrtsoftplus_deepseek_bias", deepseek});
  out.push_back({"sigmoid_k1", base(ScoreFunction::sigmoid, 8, 1)});
  auto hash = base(ScoreFunction::sqrtsoftplus, 8, 2);
  hash.hash_routing = true;
  out.push_back({"sqrtsoftplus_hash", hash});
  return out;
}

template <typename T>
void check_router(const Case& tc) {
  SCOPED_TRACE(tc.name);
  const MoeConfig& c = tc.config;
  const int n = 37, h = c.hidden, E = c.num_experts, k = c.topk, vocab = 11;
  const auto xs = dyadic(std::size_t(n * h), 1), ws = dyadic(std::size_t(E * h), 2), bs = dyadic(std::size_t(E), 3);
  Matrix<T> x = Eigen::Map<const Matrix<double>>(xs.data(), n, h).cast<T>();
  Matrix<T> w = Eigen::Map<const Matrix<double>>(ws.data(), E, h).cast<T>();
  Vector<T> bias = Eigen::Map<const Vector<double>>(bs.data(), E).cast<T>();
  IndexMatrix tid2eid(vocab, k);
  for (int v = 0; v < vocab; ++v)
    for (int j = 0; j < k; ++j) tid2eid(v, j) = (3 * v + 5 * j) % E;
  dist::RouterInputs in;
  in.token_ids.resize(n);
  for (int t = 0; t < n; ++t) in.token_ids(t) = (7 * t) % vocab;
  const auto cpu = dist::route_local<T>(c, x, w, bias, tid2eid, in);

  DeviceContext ctx;
  const RouterSpec spec = router_spec(c);
  const auto d_x = upload(std::vector<T>(x.data(), x.data() + x.size()));
  const auto d_w = upload(std::vector<T>(w.data(), w.data() + w.size()));
  const auto d_bias = upload(std::vector<T>(bias.data(), bias.data() + E));
  const auto d_ids = upload(std::vector<std::int64_t>(in.token_ids.data(), in.token_ids.data() + n));
  const auto d_table = upload(std::vector<std::int64_t>(tid2eid.data(), tid2eid.data() + tid2eid.size()));
  const auto r = route<T>(ctx, spec, d_x.data(), n, h, d_w.data(), c.expert_bias ? d_bias.data() : nullptr,
                          c.hash_routing ? d_ids.data() : nullptr, c.hash_routing ? d_table.data() : nullptr);
  ctx.synchronize();
  const auto ids = r.topk_ids.to_host();
  const auto probs = r.topk_probs.to_host();
  std::vector<double> ref_probs;
  for (int t = 0; t < n; ++t)
    for (int j = 0; j < k; ++j) {
      ASSERT_EQ(ids[std::size_t(t * k + j)], cpu.topk(t, j)) << "token " << t << " choice " << j;
      ref_probs.push_back(double(cpu.probs(t, cpu.topk(t, j))));
    }
  expect_close(probs, ref_probs, tolerance<T>(), "topk_probs");
  expect_close(r.scores.to_host(), std::vector<T>(cpu.scores.data(), cpu.scores.data() + cpu.scores.size()),
               tolerance<T>(), "scores");

  // Backward: a gradient on each selected probability, through the logits to x and W_g.
  const auto gs = uniform(std::size_t(n * k), 4);
  Matrix<T> grad_probs = Matrix<T>::Zero(n, E);
  for (int t = 0; t < n; ++t)
    for (int j = 0; j < k; ++j) grad_probs(t, cpu.topk(t, j)) = T(gs[std::size_t(t * k + j)]);
  const Matrix<T> grad_logits = dist::route_local_backward<T>(c, cpu, grad_probs);
  const Matrix<T> grad_x = grad_logits * w;
  const Matrix<T> grad_w = grad_logits.transpose() * x;
  const auto d_g = upload(cast<T>(gs));
  DeviceBuffer<T> d_grad_x(static_cast<std::size_t>(n * h)), d_grad_w(static_cast<std::size_t>(E * h));
  d_grad_w.zero(ctx.stream());  // accumulated into on ctx's stream
  route_grad<T>(ctx, spec, r, d_x.data(), n, h, d_w.data(), d_g.data(), d_grad_x.data(), d_grad_w.data());
  ctx.synchronize();
  expect_close(d_grad_x.to_host(), std::vector<T>(grad_x.data(), grad_x.data() + grad_x.size()), tolerance<T>(),
               "grad_x");
  expect_close(d_grad_w.to_host(), std::vector<T>(grad_w.data(), grad_w.data() + grad_w.size()), tolerance<T>(),
               "grad_router_weight");
}

TEST(CudaRouter, MatchesCpuRouterInDouble) {
  MOE_REQUIRE_GPU();
  for (const auto& c : cases()) check_router<double>(c);
}

TEST(CudaRouter, MatchesCpuRouterInFloat) {
  MOE_REQUIRE_GPU();
  for (const auto& c : cases()) check_router<float>(c);
}

TEST(CudaRouter, RefusesCapacityAndOversizedSpecs) {
  auto c = base(ScoreFunction::softmax, 8, 2);
  c.capacity_factor = 1.0;
  EXPECT_THROW(router_spec(c), std::invalid_argument);
  RouterSpec s;
  s.experts = 2048;
  s.topk = 2;
  EXPECT_THROW(check_router_spec(s), std::invalid_argument);
}

}  // namespace
}  // namespace moe::cuda
