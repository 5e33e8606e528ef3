#include "cuda/device_router.hpp"

#include "cuda/gemm.hpp"

#include <stdexcept>
#include <string>

namespace moe::cuda {

RouterSpec router_spec(const MoeConfig& c) {
  c.validate();
  if (c.capacity_factor)
    throw std::invalid_argument("CUDA router: capacity (dropping, padding) is host control; the device router is dropless");
  RouterSpec s;
  // Every score function the kernels compute; one they do not is refused here, never left at the default (the
  // kernels' last branch would compute sqrt-softplus for it).
  s.score = [&] {
    switch (c.score_function) {
      case ScoreFunction::softmax: return RouterSpec::Score::softmax;
      case ScoreFunction::sigmoid: return RouterSpec::Score::sigmoid;
      case ScoreFunction::sqrtsoftplus: return RouterSpec::Score::sqrtsoftplus;
    }
    throw std::invalid_argument("CUDA router: score function " + std::string(to_string(c.score_function)) +
                                " has no device kernel");
  }();
  s.pre_softmax = c.pre_softmax;
  s.use_bias = c.expert_bias;
  s.hash = c.hash_routing;
  // Megatron: renormalise over k > 1 (always on hash layers) with +1e-20; DeepSeek: always, exactly.
  s.renormalise = c.normalization == Normalization::deepseek || c.topk > 1 || c.hash_routing;
  s.renormalise_epsilon = c.normalization == Normalization::deepseek ? 0.0 : 1e-20;
  s.scaling = c.topk_scaling_factor;
  s.experts = c.num_experts;
  s.topk = c.topk;
  s.num_groups = c.num_groups;
  s.group_topk = c.group_topk;
  check_router_spec(s);
  return s;
}

template <typename T>
DeviceRouting<T> route(const DeviceContext& ctx, const RouterSpec& spec, const T* x, std::int64_t tokens,
                       std::int64_t hidden, const T* router_weight, const T* bias, const std::int64_t* token_ids,
                       const std::int64_t* tid2eid) {
  const auto E = std::int64_t(spec.experts), k = std::int64_t(spec.topk);
  // Stream-ordered: a layer step allocates these every call, and cudaFree would synchronise the device each time.
  const cudaStream_t s = ctx.stream();
  DeviceRouting<T> r{DeviceBuffer<T>(std::size_t(tokens * E), s), DeviceBuffer<T>(std::size_t(tokens * E), s),
                     DeviceBuffer<std::int32_t>(std::size_t(tokens * k), s),
                     DeviceBuffer<T>(std::size_t(tokens * k), s)};
  // logits [n, E] = x · W_gᵀ
  gemm<T>(ctx, Op::n, Op::t, tokens, E, hidden, x, hidden, router_weight, hidden, r.logits.data(), E, 0);
  route_topk<T>(ctx.stream(), spec, tokens, r.logits.data(), bias, token_ids, tid2eid, r.scores.data(),
                r.topk_ids.data(), r.topk_probs.data());
  return r;
}

template <typename T>
void route_grad(const DeviceContext& ctx, const RouterSpec& spec, const DeviceRouting<T>& r, const T* x,
                std::int64_t tokens, std::int64_t hidden, const T* router_weight, const T* grad_topk_probs, T* grad_x,
                T* grad_router_weight, int grad_x_beta) {
  const auto E = std::int64_t(spec.experts);
  DeviceBuffer<T> grad_logits(std::size_t(tokens * E), ctx.stream());
  route_backward<T>(ctx.stream(), spec, tokens, r.logits.data(), r.scores.data(), r.topk_ids.data(), grad_topk_probs,
                    grad_logits.data());
  // grad_x [n, h] = grad_logits · W_g;  grad_W_g [E, h] += grad_logitsᵀ · x
  gemm<T>(ctx, Op::n, Op::n, tokens, hidden, E, grad_logits.data(), E, router_weight, hidden, grad_x, hidden,
          grad_x_beta);
  gemm<T>(ctx, Op::t, Op::n, E, hidden, tokens, grad_logits.data(), E, x, hidden, grad_router_weight, hidden, 1);
}

template DeviceRouting<double> route<double>(const DeviceContext&, const RouterSpec&, const double*, std::int64_t,
                                             std::int64_t, const double*, const double*, const std::int64_t*,
                                             const std::int64_t*);
template DeviceRouting<float> route<float>(const DeviceContext&, const RouterSpec&, const float*, std::int64_t,
                                           std::int64_t, const float*, const float*, const std::int64_t*,
                                           const std::int64_t*);
template void route_grad<double>(const DeviceContext&, const RouterSpec&, const DeviceRouting<double>&, const double*,
                                 std::int64_t, std::int64_t, const double*, const double*, double*, double*, int);
template void route_grad<float>(const DeviceContext&, const RouterSpec&, const DeviceRouting<float>&, const float*,
                                std::int64_t, std::int64_t, const float*, const float*, float*, float*, int);

}  // namespace moe::cuda
