// The device layer's forward and backward (expert_layer.hpp: route → permute → grouped SwiGLU → unpermute and back,
// everything on the device; the code cuda_bench times) against the oracle's moe_forward / moe_backward in double on
// the same tokens and weights (rounded through T): the output, dx, the router weight's gradient and every expert's,
// within the layer row of reference/tolerance.hpp. Softmax and sigmoid routers, with and without the clamp, an
// expert bias on the ranking.
#include "cuda/expert_layer.hpp"
#include "cuda/tests/gpu_test.hpp"
#include "reference/moe_layer.hpp"

namespace moe::cuda {
namespace {

using namespace testing;

template <typename T>
Matrix<double> random_rounded(Eigen::Index rows, Eigen::Index cols, unsigned seed, double scale) {
  const auto v = rounded<T>(uniform(std::size_t(rows * cols), seed, scale));
  return Eigen::Map<const Matrix<double>>(v.data(), rows, cols);
}

template <typename T>
std::vector<T> flat_as(const Matrix<double>& m) {
  return cast<T>(std::vector<double>(m.data(), m.data() + m.size()));
}

template <typename T>
std::vector<T> stacked_as(const std::vector<Matrix<double>>& ms) {
  std::vector<double> all;
  for (const auto& m : ms) all.insert(all.end(), m.data(), m.data() + m.size());
  return cast<T>(all);
}

template <typename R>
std::vector<double> flat(const Matrix<R>& m) {
  return {m.data(), m.data() + m.size()};
}

template <typename T>
void check_layer(ScoreFunction score, bool clamp, bool bias) {
  SCOPED_TRACE(std::string(to_string(score)) + (clamp ? ", clamp" : "") + (bias ? ", expert bias" : ""));
  MoeConfig c;
  c.hidden = 32;
  c.num_experts = 8;
  c.topk = 2;
  c.ffn_hidden = 24;
  c.score_function = score;
  c.expert_bias = bias;
  if (clamp) c.swiglu_clamp = 0.4;
  c.validate();
  const int n = 40, h = c.hidden, E = c.num_experts, d = c.ffn_hidden;

  MoeParams<double> p;
  p.router_weight = random_rounded<Acc<T>>(E, h, 1, 0.3);
  if (bias) p.expert_bias = random_rounded<Acc<T>>(E, 1, 2, 0.1).col(0);
  for (int e = 0; e < E; ++e) {
    p.expert_fc1.push_back(random_rounded<T>(2 * d, h, 10 + unsigned(e), 0.3));
    p.expert_fc2.push_back(random_rounded<T>(h, d, 30 + unsigned(e), 0.3));
  }
  MoeInputs<double> in;
  in.seq = n;
  in.batch = 1;
  in.x = random_rounded<T>(n, h, 3, 1.0);
  const Matrix<double> gy = random_rounded<T>(n, h, 4, 1.0);
  const MoeForward<double> fwd = moe_forward(c, p, in, ExpertPath::expert_batched);
  const MoeGradients<double> want = moe_backward(c, p, in, fwd, gy, LossScales{}, ExpertPath::expert_batched);

  const auto d_x = upload(flat_as<T>(in.x)), d_gy = upload(flat_as<T>(gy));
  const auto d_w = upload(flat_as<Acc<T>>(p.router_weight));
  const auto d_bias = upload(cast<Acc<T>>(std::vector<double>(p.expert_bias.data(), p.expert_bias.data() + p.expert_bias.size())));
  const auto d_f1 = upload(stacked_as<T>(p.expert_fc1)), d_f2 = upload(stacked_as<T>(p.expert_fc2));
  DeviceExpertLayer<T> layer;
  layer.spec = router_spec(c);
  layer.options.clamp = c.routed_clamp();
  layer.options.clamp_limit_passes = c.clamp_limit_passes();
  layer.router_weight = d_w.data();
  layer.expert_bias = bias ? d_bias.data() : nullptr;
  layer.experts = {d_f1.data(), d_f2.data(), h, d};

  DeviceContext ctx;
  DeviceBuffer<T> y(std::size_t(n * h)), dx(std::size_t(n * h)), g1(d_f1.size()), g2(d_f2.size());
  DeviceBuffer<Acc<T>> gw(d_w.size());
  g1.zero(ctx.stream());
  g2.zero(ctx.stream());
  gw.zero(ctx.stream());
  const auto saved = expert_layer_forward<T>(ctx, layer, d_x.data(), n, y.data());
  expert_layer_backward<T>(ctx, layer, saved, d_x.data(), n, d_gy.data(), dx.data(), gw.data(), g1.data(), g2.data());
  ctx.synchronize();

  const Tolerance tol = moe::tolerance(Compared::layer, std::is_same_v<T, double> ? Precision::float64 : Precision::float32);
  expect_close(y.to_host(), flat(fwd.y), tol, "y");
  expect_close(dx.to_host(), flat(want.x), tol, "dx");
  expect_close(gw.to_host(), flat(want.params.router_weight), tol, "grad router weight");
  std::vector<double> g1_want, g2_want;
  for (int e = 0; e < E; ++e) {
    const auto a = flat(want.params.expert_fc1[std::size_t(e)]), b = flat(want.params.expert_fc2[std::size_t(e)]);
    g1_want.insert(g1_want.end(), a.begin(), a.end());
    g2_want.insert(g2_want.end(), b.begin(), b.end());
  }
  expect_close(g1.to_host(), g1_want, tol, "grad fc1");
  expect_close(g2.to_host(), g2_want, tol, "grad fc2");
}

template <typename T>
void check_layers() {
  check_layer<T>(ScoreFunction::softmax, false, false);
  check_layer<T>(ScoreFunction::sigmoid, true, true);
  check_layer<T>(ScoreFunction::sqrtsoftplus, false, true);
}

TEST(CudaExpertLayer, ForwardAndBackwardMatchTheOracleDouble) {
  MOE_REQUIRE_GPU();
  check_layers<double>();
}
TEST(CudaExpertLayer, ForwardAndBackwardMatchTheOracleFloat) {
  MOE_REQUIRE_GPU();
  check_layers<float>();
}

}  // namespace
}  // namespace moe::cuda
