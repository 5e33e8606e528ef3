// One rank's routed-expert layer on device, every expert local (EP = 1), forward and backward with everything on
// the device for the whole step (the host holds only control: the group sizes for the GEMMs):
//   forward   route (logits GEMM, scores, top-k) → permute → grouped SwiGLU (probabilities after the activation)
//             → unpermute (unweighted: the experts applied them);
//   backward  unpermute's backward → grouped SwiGLU backward (dx, dprob, weight gradients) → the probabilities'
//             gradient back to slot order → unpermute of dx (each token's k rows, fixed order) → router backward,
//             its share of dx added in the router dtype.
// Used by the tests (against the oracle's moe_forward / moe_backward, and batch invariance) and by the benchmark,
// which times this code. The router runs in Acc<T> (fp32 for bf16 data, as docs/layer.md asks). Dropless, no
// shared expert and no balance losses (the device router's limits, device_router.hpp).
#pragma once

#include "cuda/device_buffer.hpp"
#include "cuda/device_context.hpp"
#include "cuda/device_router.hpp"
#include "cuda/element.hpp"
#include "cuda/grouped_swiglu.hpp"
#include "cuda/router_kernels.hpp"

#include <cstdint>
#include <vector>

namespace moe::cuda {

template <typename T>
struct DeviceExpertLayer {
  RouterSpec spec;
  kernels::SwigluOptions options;
  const Acc<T>* router_weight = nullptr;  // [E, h]
  const Acc<T>* expert_bias = nullptr;    // [E] with spec.use_bias
  DeviceExperts<T> experts;               // all E experts, width h
};

// What the backward reads from the forward, kept on the device (stream-ordered on the forward's context: drop it
// before the context).
template <typename T>
struct DeviceLayerActivations {
  DeviceRouting<Acc<T>> routing;           // logits, scores, top-k ids and probabilities
  DeviceBuffer<Acc<T>> x_router;           // x in the router dtype (empty when T is it)
  DeviceBuffer<std::int32_t> row_slot, slot_row;
  std::vector<std::int64_t> group_sizes;   // [E], on the host
  DeviceBuffer<T> permuted, pre, expert_out;
  DeviceBuffer<Acc<T>> permuted_probs;
};

// y [n, h] from x [n, h]. Synchronises the stream once (the group sizes go to the host for the GEMMs). x must
// stay alive and unchanged until the backward.
template <typename T>
DeviceLayerActivations<T> expert_layer_forward(const DeviceContext& ctx, const DeviceExpertLayer<T>& layer,
                                               const T* x, std::int64_t tokens, T* y);

// From dy [n, h]: writes dx [n, h]; accumulates into grad_router_weight [E, h], grad_fc1 [E, 2d, h] and
// grad_fc2 [E, h, d].
template <typename T>
void expert_layer_backward(const DeviceContext& ctx, const DeviceExpertLayer<T>& layer,
                           const DeviceLayerActivations<T>& saved, const T* x, std::int64_t tokens, const T* dy, T* dx,
                           Acc<T>* grad_router_weight, T* grad_fc1, T* grad_fc2);

}  // namespace moe::cuda
