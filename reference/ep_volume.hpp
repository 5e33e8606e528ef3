// Communication and memory accounting of one MoE layer under a parallel layout, for one microbatch.
//
// Shape arithmetic only (docs/parallelism.md, "Communication volume"): expected values under uniform routing, not a
// measured load. Per rank, with n rows entering the layer, k experts per token, E experts, L = E/EP local
// experts, h the routed width (latent_size when latent MoE is on), d the expert ffn width:
//   n                      = b·S / (TP·CP)            rows after sequence and context parallel sharding
//   tokens per EP group    = EP·n                      (all ranks of a stage hold disjoint rows)
//   rows per expert        = ETP·EP·n·k / E            (an expert's rows come from its whole tp_ep domain)
//   rows per rank          = L · rows per expert = ETP·n·k
//   dispatch payload       = n·k rows × h × 2 B        (AlltoAll send buffer, one direction, local rows included)
//   remote dispatch        = (EP−1)/EP of it; forward = dispatch + combine; with backward, four exchanges
//   routed weights / rank  = L · 3·h·d / ETP params × 2 B per layer, × the MoE layers of the fullest stage
//   AllGather receive      = [ETP·EP·n, h]  vs  AlltoAll expected receive [k·n, h]
//   balance point          = 6hd FLOPs / (h + 2h) B = 2d FLOPs/Byte (FP8 dispatch, BF16 combine)
// Not counted: probabilities, split counts, padding, protocol overhead, recomputation, ETP collectives.
#pragma once

#include "reference/parallel_layout.hpp"
#include "reference/presets.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace moe {

struct EpVolume {
  // Inputs as used.
  int width = 0;          // h: routed hidden width
  int ffn_hidden = 0;     // d
  int num_experts = 0;    // E
  int topk = 0;           // k
  int local_experts = 0;  // L = E/EP
  int moe_layers_per_stage = 0;
  int bytes_per_element = 2;  // bf16

  // Tokens and rows (per microbatch, per MoE layer).
  std::int64_t rows_per_rank = 0;
  std::int64_t unique_tokens_per_ep_group = 0;
  std::int64_t assignments_per_ep_group = 0;
  double expected_rows_per_expert = 0;
  double expected_rows_per_rank = 0;

  // EP AlltoAll hidden payload, bytes, per rank.
  std::int64_t dispatch_bytes = 0;
  double remote_dispatch_bytes = 0;
  double forward_bytes = 0;           // dispatch + combine, remote
  double forward_backward_bytes = 0;  // the four EP hidden exchanges, remote

  // Routed-expert weights per rank.
  std::int64_t params_per_expert = 0;  // 3·h·d (gate, up, down)
  std::int64_t weight_bytes_per_layer = 0;
  std::int64_t weight_bytes_per_stage = 0;

  // Receive buffers per rank: AllGather over tp_ep vs AlltoAll (expected, uniform routing).
  std::int64_t allgather_rows = 0;
  std::int64_t allgather_bytes = 0;
  double alltoall_rows = 0;
  double alltoall_bytes = 0;

  // Expert FLOPs per byte of dispatch (FP8) + combine (BF16) per assignment: 6hd / 3h = 2d.
  double balance_flops_per_byte = 0;

  std::vector<std::string> assumptions;
};

// moe_layers_per_stage overrides the preset's depth (the fullest stage of an even split: at most
// ceil((num_dense_layers + num_layers)/pp) blocks, of which at most num_layers are MoE). Throws
// std::invalid_argument naming the rule when the shapes do not divide or the depth is unknown.
EpVolume ep_volume(const LayerPreset& preset, const ParallelLayout& layout, int seq, int micro_batch,
                   std::optional<int> moe_layers_per_stage = std::nullopt);

}  // namespace moe
