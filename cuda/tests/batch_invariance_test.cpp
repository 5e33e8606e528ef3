// Deterministic mode: in GemmMode::batch_invariant a token's layer output is the same bits whether it is routed
// alone with a few tokens or inside a larger batch (the expert groups, hence the GEMM shapes, differ).
#include "cuda/expert_layer.hpp"
#include "cuda/tests/gpu_test.hpp"

namespace moe::cuda {
namespace {

using namespace testing;

template <typename T>
void check_batch_invariance() {
  const int h = 32, E = 8, k = 2, d = 24, big = 64, small = 5;
  const auto xs = uniform(std::size_t(big * h), 21), ws = uniform(std::size_t(E * h), 22),
             f1 = uniform(std::size_t(E * 2 * d * h), 23, 0.3), f2 = uniform(std::size_t(E * h * d), 24, 0.3);
  const auto d_x = upload(cast<T>(xs)), d_f1 = upload(cast<T>(f1)), d_f2 = upload(cast<T>(f2));
  const auto d_w = upload(cast<Acc<T>>(ws));
  DeviceExpertLayer<T> layer;
  layer.spec.score = RouterSpec::Score::sigmoid;
  layer.spec.renormalise = true;
  layer.spec.renormalise_epsilon = 1e-20;
  layer.spec.experts = E;
  layer.spec.topk = k;
  layer.options.clamp = 7.0;
  layer.router_weight = d_w.data();
  layer.experts = {d_f1.data(), d_f2.data(), h, d};

  DeviceContext ctx(GemmMode::batch_invariant);
  DeviceBuffer<T> y_big(static_cast<std::size_t>(big * h)), y_small(static_cast<std::size_t>(small * h));
  expert_layer_forward<T>(ctx, layer, d_x.data(), big, y_big.data());
  // The same first tokens, now in a batch of `small`: a prefix of x.
  expert_layer_forward<T>(ctx, layer, d_x.data(), small, y_small.data());
  ctx.synchronize();
  const auto a = y_big.to_host(), b = y_small.to_host();
  for (std::size_t i = 0; i < b.size(); ++i)
    ASSERT_EQ(as_double(a[i]), as_double(b[i])) << "token " << i / h << " column " << i % h;
}

TEST(CudaBatchInvariance, LayerOutputOfATokenIgnoresTheBatchFloat) {
  MOE_REQUIRE_GPU();
  check_batch_invariance<float>();
}
TEST(CudaBatchInvariance, LayerOutputOfATokenIgnoresTheBatchBf16) {
  MOE_REQUIRE_GPU();
  check_batch_invariance<bf16>();
}

}  // namespace
}  // namespace moe::cuda
