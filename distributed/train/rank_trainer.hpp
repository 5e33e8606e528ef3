// Whole training steps on one rank: train_step (forward, backward, bias counts), the optimizer (DDP or
// distributed), the expert-bias update, and checkpoints. Every rank of the world drives its trainer in lockstep.
#pragma once

#include "distributed/train/checkpoint.hpp"
#include "distributed/train/rank_optimizer.hpp"
#include "distributed/train/train_step.hpp"

namespace moe::dist {

class RankTrainer {
 public:
  // Starts from global parameters (every rank passes the same) or from a loaded checkpoint.
  RankTrainer(const ModelConfig& config, const ModelParams<double>& global, const ProcessGroups& groups,
              const RankGroups& comms, const StepOptions& options, const OptimizerSettings& optimizer);
  RankTrainer(const ModelConfig& config, const TrainingState& state, const ProcessGroups& groups,
              const RankGroups& comms, const StepOptions& options, const OptimizerSettings& optimizer);
  RankTrainer(const RankTrainer&) = delete;
  RankTrainer& operator=(const RankTrainer&) = delete;

  // One step on `batch`; returns the objective J of the step. With options.hot_expert_slots, the step runs the plans
  // made from the previous step's counts (none on the first step).
  double step(const GlobalBatch& batch);

  ModelShard<double>& params() { return shard_; }
  ShardMoments moments() const { return optimizer_.moments(); }  // collective when distributed
  double grad_norm() const { return optimizer_.last_grad_norm(); }  // of the last step, before clipping

  // Collective over the world that owns this trainer's groups.
  void save(const std::string& dir, Communicator& world);

 private:
  // Replicated hot experts: the next step's plans from this step's counts (StepOptions::hot_expert_slots).
  void plan_next_step(const RankStep& s);

  const ModelConfig& config_;
  const ProcessGroups& groups_;
  const RankGroups& comms_;
  StepOptions options_;
  ModelShard<double> shard_;
  RankOptimizer optimizer_;
  int steps_ = 0;
};

}  // namespace moe::dist
