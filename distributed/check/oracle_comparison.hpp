// Comparing one rank's training step with the oracle: its shard of every synchronised gradient against the
// oracle's gradient cut the same way, the objective, the updated expert biases, and each of its layers' expert
// counts. The counts are compared on their own because hash layers have no bias: there they feed only the replica
// plans of the next step, so a wrong count would otherwise pass unseen.
//
// A value passes when |got − want| ≤ atol + rtol·|want| (reference/tolerance.hpp). Errors are kept per class of quantity,
// and the first failing element (tensor, rank, flat index) is named so a user can go straight to it.
#pragma once

#include "distributed/train/model_shard.hpp"
#include "distributed/train/rank_optimizer.hpp"
#include "distributed/train/train_step.hpp"
#include "reference/global_step.hpp"
#include "reference/tolerance.hpp"
#include "reference/trajectory.hpp"

#include <array>
#include <string>
#include <string_view>

namespace moe::dist {

enum class Quantity {
  objective,
  grad_sequence_parallel,
  grad_dense,
  grad_expert,
  expert_bias,
  expert_counts,    // per layer, the expert counts behind the bias update and the replica plans: compared exactly
  parameters,       // after an optimizer step (multi-step runs)
  optimizer_state,  // Adam moments after a step
};
constexpr int kQuantities = 8;
std::string_view to_string(Quantity q);

struct Mismatch {
  std::string tensor;
  int rank = 0;
  Eigen::Index index = 0;
  double got = 0, want = 0;
};

struct QuantityError {
  double max_abs = 0;
  double max_ratio = 0;  // max |got − want| / (atol + rtol·|want|): ≤ 1 passes
  long long compared = 0;
};

struct RankComparison {
  std::array<QuantityError, kQuantities> errors{};
  bool failed = false;
  Mismatch first;  // when failed: the first element that fails, in tensor order

  bool pass() const { return !failed; }
  void merge(const RankComparison& other);  // max of errors; keeps the earliest-rank mismatch
};

RankComparison compare_with_oracle(const ModelConfig& config, const GlobalStep& oracle, RankStep& step,
                                   const ProcessGroups& groups, int rank, const Tolerance& tolerance);

// After a whole training step: the objective, the gradient norm before clipping, every parameter of the shard (expert biases included) and the
// Adam moments (`moments` empty for SGD) against the oracle's trajectory point.
RankComparison compare_with_trajectory(const ModelConfig& config, const TrajectoryPoint& oracle, double objective,
                                       double grad_norm,
                                       ModelShard<double>& params, const ShardMoments& moments,
                                       const ProcessGroups& groups, int rank, const Tolerance& tolerance);

}  // namespace moe::dist
