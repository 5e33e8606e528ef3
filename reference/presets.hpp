// Named layer configurations. tiny-* run in tests and on the command line; full-size ones are for accounting.
#pragma once

#include "reference/attention.hpp"
#include "reference/config.hpp"

#include <string>
#include <string_view>
#include <vector>

namespace moe {

struct LayerPreset {
  std::string name;
  std::string description;
  MoeConfig config;
  int seq = 0;    // default sequence length of a run
  int batch = 0;  // default micro-batch
  int vocab = 0;  // vocabulary size for hash routing
  // Model depth: the MoE blocks, for the runs and for per-stage accounting (`volume`); 0 where unknown. MTP layers
  // are not counted.
  int num_layers = 0;
  int num_dense_layers = 0;  // leading blocks with a dense FFN, before the MoE blocks (accounting only)
  int n_hash_layers = 0;     // of the MoE layers, the first n route by tid2eid (DeepSeek-V4: 3)
  AttentionConfig attention{};  // the blocks' attention (heads 0: blocks without attention)
  // The shared expert's width in routed experts (DeepSeek's n_shared_experts: width = n · ffn_hidden), so that a new
  // routed width (--moe-ffn-hidden-size) carries it along; 0 where the shared width is its own number.
  int shared_experts = 0;
  int mtp_depth = 0;            // multi-token-prediction depths after the main model
  double mtp_loss_scale = 0.1;  // λ (Megatron's default)
};

// Throws std::invalid_argument listing the known names.
const LayerPreset& layer_preset(std::string_view name);
const std::vector<LayerPreset>& layer_presets();

}  // namespace moe
