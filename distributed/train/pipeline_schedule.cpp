#include "distributed/train/pipeline_schedule.hpp"

#include <algorithm>
#include <stdexcept>

namespace moe::dist {

std::vector<PipelineOp> one_forward_one_backward(int stages, int stage, int microbatches) {
  if (stages < 1 || stage < 0 || stage >= stages || microbatches < 1)
    throw std::invalid_argument("1F1B: need 0 <= stage < stages and at least one microbatch");
  const int warmup = std::min(stages - stage - 1, microbatches);
  std::vector<PipelineOp> ops;
  for (int i = 0; i < warmup; ++i) ops.push_back({true, i});
  for (int k = 0; k < microbatches - warmup; ++k) {
    ops.push_back({true, warmup + k});
    ops.push_back({false, k});
  }
  for (int k = microbatches - warmup; k < microbatches; ++k) ops.push_back({false, k});
  return ops;
}

std::vector<PipelineOp> all_forward_all_backward(int microbatches) {
  std::vector<PipelineOp> ops;
  for (int i = 0; i < microbatches; ++i) ops.push_back({true, i});
  for (int i = 0; i < microbatches; ++i) ops.push_back({false, i});
  return ops;
}

}  // namespace moe::dist
