#include "distributed/train/pipeline_schedule.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

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

std::vector<PipelineOp> interleaved_one_forward_one_backward(int stages, int stage, int microbatches, int chunks) {
  if (chunks < 1) throw std::invalid_argument("interleaved 1F1B: need at least one model chunk");
  if (chunks == 1) return one_forward_one_backward(stages, stage, microbatches);
  if (stages < 2 || stage < 0 || stage >= stages || microbatches < 1)
    throw std::invalid_argument("interleaved 1F1B: need pp >= 2, 0 <= stage < pp and at least one microbatch");
  if (microbatches % stages != 0)
    throw std::invalid_argument("interleaved 1F1B: the number of microbatches (" + std::to_string(microbatches) +
                                ") must be a multiple of pp (" + std::to_string(stages) + "), as Megatron requires");
  const int total = microbatches * chunks, group = stages * chunks;
  const auto op = [&](int k, bool forward) {
    const int in_group = (k % group) / stages;
    return PipelineOp{forward, (k / group) * stages + k % stages, forward ? in_group : chunks - 1 - in_group};
  };
  const int warmup =
      microbatches == stages ? total : std::min((stages - stage - 1) * 2 + (chunks - 1) * stages, total);
  std::vector<PipelineOp> ops;
  for (int k = 0; k < warmup; ++k) ops.push_back(op(k, true));
  for (int k = 0; k < total - warmup; ++k) {
    ops.push_back(op(warmup + k, true));
    ops.push_back(op(k, false));
  }
  for (int k = total - warmup; k < total; ++k) ops.push_back(op(k, false));
  return ops;
}

std::vector<PipelineOp> all_forward_all_backward(int microbatches, int chunks) {
  std::vector<PipelineOp> ops;
  for (int c = 0; c < chunks; ++c)
    for (int i = 0; i < microbatches; ++i) ops.push_back({true, i, c});
  for (int c = chunks; c-- > 0;)
    for (int i = 0; i < microbatches; ++i) ops.push_back({false, i, c});
  return ops;
}

}  // namespace moe::dist
