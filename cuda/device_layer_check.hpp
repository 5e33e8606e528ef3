// The device layer (expert_layer.hpp: forward and backward on one GPU, the code cuda_bench times) against the
// oracle's layer (reference/moe_layer.hpp) on the same tokens and weights. `check --kernels cuda` runs it for each
// layer of its set; the layer test runs it too.
//
// The device layer is the routed experts of a layer: a router (softmax, sigmoid or sqrt-softplus, expert bias,
// groups), the grouped SwiGLU (clamp) and the combine. So a layer is compared through its routed experts alone:
// routed_layer_of drops what the device layer does not compute and names it, and refuses what would change the
// routed experts themselves.
#pragma once

#include "cuda/device_context.hpp"
#include "reference/config.hpp"
#include "reference/tolerance.hpp"

#include <string>
#include <utility>
#include <vector>

namespace moe::cuda {

struct RoutedLayer {
  MoeConfig config;                    // the routed experts of the layer
  std::vector<std::string> left_out;   // what the layer had that `config` drops ("shared expert", …)
};

// Drops the shared expert, the latent projection, the balance and z losses, the bias update, bf16 storage and FP8
// dispatch. Throws std::invalid_argument naming what the device layer cannot compute: capacity (dropping is host
// control), hash routing (it takes no token ids), probabilities on the input.
RoutedLayer routed_layer_of(const MoeConfig& config);

struct DeviceLayerComparison {
  std::vector<std::pair<std::string, double>> max_abs;  // per tensor: y, dx, grad router, grad fc1, grad fc2
  Tolerance tolerance;
  bool pass = true;
  std::string first_failure;  // "dx[17]: got …, oracle …" when it fails
};

// `tokens` random tokens and weights (from `seed`, rounded through the device type) through the oracle in double
// and through the device layer in double (float64) or float (float32) on `mode`'s GEMMs; compared within the layer
// row of reference/tolerance.hpp. Needs a GPU.
DeviceLayerComparison compare_device_layer(const MoeConfig& routed, int tokens, unsigned seed, Precision precision,
                                           GemmMode mode = GemmMode::cublas);

}  // namespace moe::cuda
