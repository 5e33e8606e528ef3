// Pipeline schedules: the order in which one pp rank runs the forward and backward passes of its microbatches.
//
// Non-interleaved 1F1B (PipeDream-flush, Megatron's default): stage s of p runs min(p − s − 1, m) warm-up
// forwards, then alternates one forward and one backward, then drains the remaining backwards.
//
// Interleaved 1F1B (Megatron's virtual pipeline, vpp = v > 1): each rank holds v model chunks, chunk c being
// virtual stage c·p + s. The rank's forwards run in groups of p microbatches per chunk — forward k is microbatch
// (k div (p·v))·p + k mod p of chunk (k mod (p·v)) div p — and its backwards the same with the chunks reversed.
// Warm-up is (p − s − 1)·2 + (v − 1)·p forwards (all m·v when m = p), then 1F1B, then the drain. Megatron asks
// m to be a multiple of p here, and so do we.
//
// In every schedule a virtual stage runs a microbatch's forward before its backward, its forward of microbatch
// i needs virtual stage − 1's forward of i, and its backward needs virtual stage + 1's backward of i. Each chunk
// sees its microbatches in increasing order in both directions, so gradients accumulate in the same order
// whatever the schedule: the schedules give the same bits.
#pragma once

#include <vector>

namespace moe::dist {

struct PipelineOp {
  bool forward = true;
  int microbatch = 0;
  int chunk = 0;  // model chunk (virtual stage c·pp + stage); 0 without interleaving
};

std::vector<PipelineOp> one_forward_one_backward(int stages, int stage, int microbatches);

// Throws std::invalid_argument unless chunks ≥ 1 and, with chunks > 1, microbatches is a multiple of stages.
std::vector<PipelineOp> interleaved_one_forward_one_backward(int stages, int stage, int microbatches, int chunks);

// All forwards (chunk by chunk), then all backwards (chunks in reverse): the schedule the results must not
// depend on.
std::vector<PipelineOp> all_forward_all_backward(int microbatches, int chunks = 1);

}  // namespace moe::dist
