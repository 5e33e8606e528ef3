#include "cuda/expert_layer.hpp"

#include "cuda/cuda_error.hpp"
#include "cuda/device_buffer.hpp"
#include "cuda/gemm.hpp"
#include "cuda/token_kernels.hpp"

#include <type_traits>
#include <vector>

namespace moe::cuda {

template <typename T>
void expert_layer_forward(const DeviceContext& ctx, const DeviceExpertLayer<T>& layer, const T* x,
                          std::int64_t tokens, T* y) {
  using A = Acc<T>;
  const cudaStream_t s = ctx.stream();
  const std::int64_t h = layer.experts.width, E = layer.spec.experts, k = layer.spec.topk, R = tokens * k;
  DeviceBuffer<A> x_router(std::is_same_v<T, A> ? 0 : std::size_t(tokens * h), s);
  const A* xr = nullptr;
  if constexpr (std::is_same_v<T, A>) {
    xr = x;
  } else {
    convert<T, A>(s, x, x_router.data(), tokens * h);
    xr = x_router.data();
  }
  DeviceBuffer<A> logits(std::size_t(tokens * E), s), scores(std::size_t(tokens * E), s), probs(std::size_t(R), s);
  DeviceBuffer<std::int32_t> ids(std::size_t(R), s), row_slot(std::size_t(R), s), slot_row(std::size_t(R), s);
  DeviceBuffer<std::int64_t> per_expert(std::size_t(E), s);
  gemm<A>(ctx, Op::n, Op::t, tokens, E, h, xr, h, layer.router_weight, h, logits.data(), E, 0);
  route_topk<A>(s, layer.spec, tokens, logits.data(), layer.expert_bias, nullptr, nullptr, scores.data(), ids.data(),
                probs.data());
  build_permutation(s, tokens, int(k), int(E), ids.data(), row_slot.data(), slot_row.data(), per_expert.data());
  DeviceBuffer<T> permuted(std::size_t(R * h), s), pre(std::size_t(R * 2 * layer.experts.ffn), s),
      expert_out(std::size_t(R * h), s);
  DeviceBuffer<A> permuted_probs(std::size_t(R), s);
  permute<T>(s, x, h, tokens, int(k), row_slot.data(), probs.data(), permuted.data(), permuted_probs.data());
  std::vector<std::int64_t> group_sizes(static_cast<std::size_t>(E));
  MOE_CUDA_CHECK(cudaMemcpyAsync(group_sizes.data(), per_expert.data(), sizeof(std::int64_t) * std::size_t(E),
                                 cudaMemcpyDeviceToHost, s));
  ctx.synchronize();
  grouped_swiglu_forward<T>(ctx, permuted.data(), group_sizes, layer.experts, permuted_probs.data(), layer.options,
                            pre.data(), expert_out.data());
  // The probabilities were applied inside the experts: combine unweighted.
  unpermute<T>(s, expert_out.data(), h, tokens, int(k), slot_row.data(), nullptr, y);
}

template void expert_layer_forward<double>(const DeviceContext&, const DeviceExpertLayer<double>&, const double*,
                                           std::int64_t, double*);
template void expert_layer_forward<float>(const DeviceContext&, const DeviceExpertLayer<float>&, const float*,
                                          std::int64_t, float*);
template void expert_layer_forward<bf16>(const DeviceContext&, const DeviceExpertLayer<bf16>&, const bf16*,
                                         std::int64_t, bf16*);

}  // namespace moe::cuda
