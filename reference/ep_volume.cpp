#include "reference/ep_volume.hpp"

#include "reference/process_groups.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace moe {
namespace {

void require(bool ok, const std::string& rule) {
  if (!ok) throw std::invalid_argument("volume rule: " + rule);
}

int stage_moe_layers(const LayerPreset& preset, int pp, std::optional<int> override_layers) {
  if (override_layers) {
    require(*override_layers >= 1, "moe layers per stage must be >= 1");
    return *override_layers;
  }
  require(preset.num_layers > 0, "preset " + preset.name + " has no model depth; give the MoE layers per stage");
  const int blocks = preset.num_layers + preset.num_dense_layers;  // the dense blocks come first
  const int fullest_stage = (blocks + pp - 1) / pp;
  return std::min(fullest_stage, preset.num_layers);
}

}  // namespace

EpVolume ep_volume(const LayerPreset& preset, const ParallelLayout& layout, int seq, int micro_batch,
                   std::optional<int> moe_layers_per_stage) {
  layout.validate();
  const auto& c = preset.config;
  c.validate();
  require(seq >= 1 && micro_batch >= 1, "seq and micro_batch must be >= 1");
  const std::int64_t tokens = static_cast<std::int64_t>(seq) * micro_batch;
  require(tokens % (layout.tp * layout.cp) == 0, "seq·micro_batch (" + std::to_string(tokens) +
                                                     ") must be divisible by tp·cp (" +
                                                     std::to_string(layout.tp * layout.cp) + ")");
  check_layer_sharding(c, layout);

  EpVolume v;
  v.width = c.expert_width();
  v.ffn_hidden = c.ffn_hidden;
  v.num_experts = c.num_experts;
  v.topk = c.topk;
  v.local_experts = c.num_experts / layout.ep;
  v.moe_layers_per_stage = stage_moe_layers(preset, layout.pp, moe_layers_per_stage);
  const std::int64_t h = v.width, d = v.ffn_hidden, k = v.topk, ep = layout.ep, etp = layout.etp;
  const std::int64_t row_bytes = h * v.bytes_per_element;
  // Every count below is a product of these; checked in floating point first so that none wraps in 64 bits.
  const auto real = [](std::int64_t x) { return static_cast<double>(x); };
  const double largest = real(etp) * real(ep) * real(tokens) * real(k) * real(row_bytes) +
                         real(c.num_experts) * 3.0 * real(h) * real(d) * real(v.bytes_per_element) *
                             std::max(v.moe_layers_per_stage, 1);
  require(largest < 0x1p62, "seq·micro_batch (" + std::to_string(tokens) + ") with this model gives byte counts "
                            "beyond 2^62: not a microbatch any machine holds");

  const std::int64_t n = tokens / (layout.tp * layout.cp);
  v.rows_per_rank = n;
  v.unique_tokens_per_ep_group = ep * n;
  v.assignments_per_ep_group = ep * n * k;
  v.expected_rows_per_expert = static_cast<double>(etp * ep * n * k) / v.num_experts;
  v.expected_rows_per_rank = v.local_experts * v.expected_rows_per_expert;

  v.dispatch_bytes = n * k * row_bytes;
  v.remote_dispatch_bytes = static_cast<double>(v.dispatch_bytes) * static_cast<double>(ep - 1) / static_cast<double>(ep);
  v.forward_bytes = 2 * v.remote_dispatch_bytes;
  v.forward_backward_bytes = 2 * v.forward_bytes;

  v.params_per_expert = 3 * h * d;
  v.weight_bytes_per_layer = v.local_experts * v.params_per_expert / etp * v.bytes_per_element;
  v.weight_bytes_per_stage = v.weight_bytes_per_layer * v.moe_layers_per_stage;

  v.allgather_rows = etp * ep * n;
  v.allgather_bytes = v.allgather_rows * row_bytes;
  v.alltoall_rows = static_cast<double>(k * n);
  v.alltoall_bytes = v.alltoall_rows * static_cast<double>(row_bytes);

  const double flops_per_assignment = 6.0 * static_cast<double>(h * d);  // gate, up, down: 2hd each
  const double bytes_per_assignment = static_cast<double>(h + 2 * h);    // FP8 dispatch + BF16 combine
  v.balance_flops_per_byte = flops_per_assignment / bytes_per_assignment;

  v.assumptions = {
      "uniform routing: every expert receives the expected number of rows",
      "dropless: no capacity dropping, no padding rows",
      "bf16 hidden states and weights (2 bytes per element); the balance point alone uses FP8 dispatch",
      "payload counts each AlltoAll once on the sending side; probabilities, split counts, protocol, "
      "recomputation and ETP collectives are not counted",
      "the stage holds the MoE layers of the fullest stage of an even split; MTP layers are not counted",
  };
  return v;
}

}  // namespace moe
