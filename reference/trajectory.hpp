// The oracle's training trajectory: N whole steps — global step (reference/global_step.hpp), optimizer
// (reference/optimizer.hpp), expert-bias update — from one starting point. What `moe-oracle check --steps N`
// compares every rank with after each step.
#pragma once

#include "reference/global_step.hpp"
#include "reference/muon.hpp"
#include "reference/named.hpp"
#include "reference/optimizer.hpp"

#include <string_view>
#include <vector>

namespace moe {

enum class OptimizerKind { sgd, adam, muon };  // muon: AdamW for what Muon does not take (muon.hpp)
inline constexpr Named<OptimizerKind> kOptimizerNames[] = {
    {OptimizerKind::adam, "adam"}, {OptimizerKind::muon, "muon"}, {OptimizerKind::sgd, "sgd"}};
constexpr std::span<const Named<OptimizerKind>> names_of(OptimizerKind) { return kOptimizerNames; }
inline std::string_view to_string(OptimizerKind kind) { return name_of(kind); }
// The inverse; std::invalid_argument "unknown optimizer 'x' (adam, muon, sgd)" for another name.
inline OptimizerKind parse_optimizer_kind(std::string_view name) {
  return parse_named<OptimizerKind>(name, "optimizer");
}

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::adam;
  SgdConfig sgd;
  AdamConfig adam;
  MuonConfig muon;
  double clip_grad = 0;  // > 0: clip the global gradient norm to this before the step (optimizer.hpp); 0: off
};

struct TrajectoryPoint {
  double objective = 0;           // J of the step (before its update)
  double grad_norm = 0;           // the global gradient norm before clipping (0 when clipping is off)
  ModelParams<double> params;     // after the update, expert biases included
  AdamState adam;                 // after the update (empty for SGD; under Muon, m is its momentum for matrices)
  std::vector<std::vector<std::int64_t>> bias_counts;  // per block [E]: the step's expert counts (GlobalStep's)
};

// Step s uses batches[s]. `adam` is the optimizer state to start from (empty: a fresh start).
std::vector<TrajectoryPoint> reference_trajectory(const ModelConfig& config, ModelParams<double> params,
                                                  const std::vector<GlobalBatch>& batches, const ParallelLayout& layout,
                                                  int micro_batch, LossMode mode, const OptimizerConfig& optimizer,
                                                  AdamState adam = {});

}  // namespace moe
