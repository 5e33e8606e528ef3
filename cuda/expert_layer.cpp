#include "cuda/expert_layer.hpp"

#include "cuda/cuda_error.hpp"
#include "cuda/gemm.hpp"
#include "cuda/token_kernels.hpp"

#include <type_traits>

namespace moe::cuda {
namespace {

// x in the router dtype: x itself when T is Acc<T>, else a converted copy kept in `storage`.
template <typename T>
const Acc<T>* router_input(cudaStream_t s, const T* x, std::int64_t count, DeviceBuffer<Acc<T>>& storage) {
  if constexpr (std::is_same_v<T, Acc<T>>) {
    return x;
  } else {
    storage = DeviceBuffer<Acc<T>>(std::size_t(count), s);
    convert<T, Acc<T>>(s, x, storage.data(), count);
    return storage.data();
  }
}

}  // namespace

template <typename T>
DeviceLayerActivations<T> expert_layer_forward(const DeviceContext& ctx, const DeviceExpertLayer<T>& layer,
                                               const T* x, std::int64_t tokens, T* y) {
  using A = Acc<T>;
  const cudaStream_t s = ctx.stream();
  const std::int64_t h = layer.experts.width, E = layer.spec.experts, k = layer.spec.topk, R = tokens * k;
  DeviceLayerActivations<T> a;
  const A* xr = router_input(s, x, tokens * h, a.x_router);
  a.routing = route<A>(ctx, layer.spec, xr, tokens, h, layer.router_weight, layer.expert_bias, nullptr, nullptr);
  a.row_slot = DeviceBuffer<std::int32_t>(std::size_t(R), s);
  a.slot_row = DeviceBuffer<std::int32_t>(std::size_t(R), s);
  DeviceBuffer<std::int64_t> per_expert(std::size_t(E), s);
  build_permutation(s, tokens, int(k), int(E), a.routing.topk_ids.data(), a.row_slot.data(), a.slot_row.data(),
                    per_expert.data());
  a.permuted = DeviceBuffer<T>(std::size_t(R * h), s);
  a.pre = DeviceBuffer<T>(std::size_t(R * 2 * layer.experts.ffn), s);
  a.expert_out = DeviceBuffer<T>(std::size_t(R * h), s);
  a.permuted_probs = DeviceBuffer<A>(std::size_t(R), s);
  permute<T>(s, x, h, tokens, int(k), a.row_slot.data(), a.routing.topk_probs.data(), a.permuted.data(),
             a.permuted_probs.data());
  a.group_sizes.resize(static_cast<std::size_t>(E));
  MOE_CUDA_CHECK(cudaMemcpyAsync(a.group_sizes.data(), per_expert.data(), sizeof(std::int64_t) * std::size_t(E),
                                 cudaMemcpyDeviceToHost, s));
  ctx.synchronize();
  grouped_swiglu_forward<T>(ctx, a.permuted.data(), a.group_sizes, layer.experts, a.permuted_probs.data(),
                            layer.options, a.pre.data(), a.expert_out.data());
  // The probabilities were applied inside the experts: combine unweighted.
  unpermute<T>(s, a.expert_out.data(), h, tokens, int(k), a.slot_row.data(), nullptr, y);
  return a;
}

template <typename T>
void expert_layer_backward(const DeviceContext& ctx, const DeviceExpertLayer<T>& layer,
                           const DeviceLayerActivations<T>& a, const T* x, std::int64_t tokens, const T* dy, T* dx,
                           Acc<T>* grad_router_weight, T* grad_fc1, T* grad_fc2) {
  using A = Acc<T>;
  const cudaStream_t s = ctx.stream();
  const std::int64_t h = layer.experts.width, k = layer.spec.topk, R = tokens * k;
  // Each permuted row's output gradient is its token's (the combine is unweighted).
  DeviceBuffer<T> d_expert_out(std::size_t(R * h), s), d_permuted(std::size_t(R * h), s);
  unpermute_backward<T>(s, dy, a.expert_out.data(), h, tokens, int(k), a.slot_row.data(), nullptr,
                        d_expert_out.data(), nullptr);
  DeviceBuffer<A> d_permuted_probs(std::size_t(R), s), d_topk_probs(std::size_t(R), s);
  grouped_swiglu_backward<T>(ctx, a.permuted.data(), a.group_sizes, layer.experts, a.permuted_probs.data(),
                             layer.options, a.pre.data(), d_expert_out.data(), d_permuted.data(),
                             d_permuted_probs.data(), grad_fc1, grad_fc2);
  // Back to slot order: slot t·k + j's probability gradient sits at its permuted row slot_row[t·k + j].
  gather_rows(s, d_permuted_probs.data(), sizeof(A), a.slot_row.data(), R, 1, d_topk_probs.data());
  if constexpr (std::is_same_v<T, A>) {
    // dx = the experts' share (each token's k rows summed in a fixed order), then the router's added to it.
    unpermute<T>(s, d_permuted.data(), h, tokens, int(k), a.slot_row.data(), nullptr, dx);
    route_grad<A>(ctx, layer.spec, a.routing, x, tokens, h, layer.router_weight, d_topk_probs.data(), dx,
                  grad_router_weight, 1);
  } else {
    // bf16 data: both shares summed in the router dtype, stored once.
    DeviceBuffer<T> dx_experts(std::size_t(tokens * h), s);
    unpermute<T>(s, d_permuted.data(), h, tokens, int(k), a.slot_row.data(), nullptr, dx_experts.data());
    DeviceBuffer<A> dx_sum(std::size_t(tokens * h), s);
    convert<T, A>(s, dx_experts.data(), dx_sum.data(), tokens * h);
    route_grad<A>(ctx, layer.spec, a.routing, a.x_router.data(), tokens, h, layer.router_weight, d_topk_probs.data(),
                  dx_sum.data(), grad_router_weight, 1);
    convert<A, T>(s, dx_sum.data(), dx, tokens * h);
  }
}

#define MOE_INSTANTIATE_EXPERT_LAYER(T)                                                                             \
  template DeviceLayerActivations<T> expert_layer_forward<T>(const DeviceContext&, const DeviceExpertLayer<T>&,    \
                                                             const T*, std::int64_t, T*);                           \
  template void expert_layer_backward<T>(const DeviceContext&, const DeviceExpertLayer<T>&,                        \
                                         const DeviceLayerActivations<T>&, const T*, std::int64_t, const T*, T*,   \
                                         Acc<T>*, T*, T*);
MOE_INSTANTIATE_EXPERT_LAYER(double)
MOE_INSTANTIATE_EXPERT_LAYER(float)
MOE_INSTANTIATE_EXPERT_LAYER(bf16)

}  // namespace moe::cuda
