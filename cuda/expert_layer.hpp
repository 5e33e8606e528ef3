// One rank's routed-expert layer forward on device, every expert local (EP = 1): route → permute → grouped
// SwiGLU → unpermute. Used by the batch-invariance test and the benchmark; the parallel layer composes the same
// pieces through the dispatchers. The router runs in Acc<T> (fp32 for bf16 data, as docs/layer.md asks).
#pragma once

#include "cuda/device_context.hpp"
#include "cuda/element.hpp"
#include "cuda/grouped_swiglu.hpp"
#include "cuda/router_kernels.hpp"

#include <cstdint>

namespace moe::cuda {

template <typename T>
struct DeviceExpertLayer {
  RouterSpec spec;
  kernels::SwigluOptions options;
  const Acc<T>* router_weight = nullptr;  // [E, h]
  const Acc<T>* expert_bias = nullptr;    // [E] with spec.use_bias
  DeviceExperts<T> experts;               // all E experts, width h
};

// y [n, h] from x [n, h]. Synchronises the stream once (the group sizes go to the host for the GEMMs).
template <typename T>
void expert_layer_forward(const DeviceContext& ctx, const DeviceExpertLayer<T>& layer, const T* x,
                          std::int64_t tokens, T* y);

}  // namespace moe::cuda
