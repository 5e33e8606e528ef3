#include "reference/trajectory.hpp"

#include <stdexcept>
#include <string>

namespace moe {

std::vector<TrajectoryPoint> reference_trajectory(const ModelConfig& config, ModelParams<double> params,
                                                  const std::vector<GlobalBatch>& batches, const ParallelLayout& layout,
                                                  int micro_batch, LossMode mode, const OptimizerConfig& optimizer,
                                                  AdamState adam) {
  std::vector<TrajectoryPoint> points;
  for (const GlobalBatch& batch : batches) {
    GlobalStep step = global_step(config, params, batch, layout, micro_batch, mode);
    const GradClip clip =
        optimizer.clip_grad > 0 ? clip_grad_norm(config, optimizer.clip_grad, step.grads) : GradClip{};
    switch (optimizer.kind) {
      case OptimizerKind::adam: adam_step(config, optimizer.adam, adam, params, step.grads); break;
      case OptimizerKind::muon: muon_step(config, optimizer.muon, optimizer.adam, adam, params, step.grads); break;
      case OptimizerKind::sgd: sgd_step(config, optimizer.sgd, params, step.grads); break;
    }
    for (size_t l = 0; l < params.layers.size(); ++l)
      if (step.expert_bias_updated[l].size() > 0) params.layers[l].expert_bias = step.expert_bias_updated[l];
    points.push_back({step.objective, clip.norm, params, adam, step.bias_counts});
  }
  return points;
}

}  // namespace moe
