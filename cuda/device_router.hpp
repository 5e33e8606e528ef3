// The router of one rank on device, end to end: logits GEMM, scores, top-k and weights (router_kernels.hpp), and
// the backward to x and W_g. The counterpart of dist::route_local without capacity: dropping and padding are
// refused here (std::invalid_argument), the CPU router keeps them.
// Router dtype T is double or float (docs/layer.md: the router runs in fp32/fp64 whatever the expert dtype).
#pragma once

#include "cuda/device_buffer.hpp"
#include "cuda/device_context.hpp"
#include "cuda/router_kernels.hpp"
#include "reference/config.hpp"

#include <cstdint>

namespace moe::cuda {

// The router rules of `config` (validated); throws if it asks for capacity, which the device path lacks.
RouterSpec router_spec(const MoeConfig& config);

template <typename T>
struct DeviceRouting {
  DeviceBuffer<T> logits, scores;        // [n, E]
  DeviceBuffer<std::int32_t> topk_ids;   // [n, k]
  DeviceBuffer<T> topk_probs;            // [n, k]
};

// x [n, h], router_weight [E, h], bias [E] (null without expert bias), token_ids [n] and tid2eid [V, k] for hash
// routing (null otherwise). The result's buffers are stream-ordered on ctx.stream(): drop it before the context.
template <typename T>
DeviceRouting<T> route(const DeviceContext& ctx, const RouterSpec& spec, const T* x, std::int64_t tokens,
                       std::int64_t hidden, const T* router_weight, const T* bias, const std::int64_t* token_ids,
                       const std::int64_t* tid2eid);

// From grad_topk_probs [n, k]: writes grad_x [n, h] (the router's share of it; grad_x_beta = 1 adds it to what
// grad_x holds) and accumulates into grad_router_weight [E, h].
template <typename T>
void route_grad(const DeviceContext& ctx, const RouterSpec& spec, const DeviceRouting<T>& routing, const T* x,
                std::int64_t tokens, std::int64_t hidden, const T* router_weight, const T* grad_topk_probs, T* grad_x,
                T* grad_router_weight, int grad_x_beta = 0);

}  // namespace moe::cuda
