// The non-interleaved 1F1B pipeline schedule (PipeDream-flush, Megatron's default): stage s of p runs
// min(p − s − 1, m) warm-up forwards, then alternates one forward and one backward, then drains the remaining
// backwards. Every stage runs every microbatch's forward before its backward, and a stage's forward of
// microbatch i needs stage s − 1's forward of i; its backward needs stage s + 1's backward of i.
#pragma once

#include <vector>

namespace moe::dist {

struct PipelineOp {
  bool forward = true;
  int microbatch = 0;
};

std::vector<PipelineOp> one_forward_one_backward(int stages, int stage, int microbatches);

// All forwards, then all backwards: the schedule the results must not depend on.
std::vector<PipelineOp> all_forward_all_backward(int microbatches);

}  // namespace moe::dist
