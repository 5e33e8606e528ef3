// One training step of the whole parallel system, as one rank runs it: every microbatch of its DP replica on
// its CP/SP share of the tokens (the data split of reference/global_step.hpp), through its pipeline stage's
// layers in a 1F1B schedule (activations and input gradients sent to the neighbouring stages), then gradient
// synchronisation and the expert-bias update. Every rank of the world calls it together. The loss weights that
// make the synchronised gradient dJ/dθ are in loss_weights.hpp, the synchronisation plan in grad_sync.hpp, and
// both read the scaling tables of reference/scaling_rules.hpp.
#pragma once

#include "distributed/dispatch/dispatcher.hpp"
#include "distributed/train/cp_attention.hpp"
#include "distributed/train/expert_replication.hpp"
#include "distributed/train/model_shard.hpp"
#include "distributed/train/rank_groups.hpp"
#include "reference/global_step.hpp"
#include "reference/tolerance.hpp"

#include <cstdint>
#include <vector>

namespace moe::dist {

enum class Schedule { one_forward_one_backward, all_forward_all_backward };

struct StepOptions {
  DispatcherKind dispatcher = DispatcherKind::alltoall;
  LossMode mode = LossMode::sum;
  int micro_batch = 1;
  Schedule schedule = Schedule::one_forward_one_backward;
  KvExchange kv_exchange = KvExchange::all_gather;  // how attention's keys and values cross the cp group
  bool synchronise = true;  // false: leave each rank's raw gradients for an optimizer that syncs them itself
  const KernelBackend* kernels = &cpu_kernels();  // the data work of the MoE layers (kernel_backend.hpp)
  Precision precision = Precision::float64;  // of the data and the gradients (losses accumulate in double); float32:
                                             // the shard is cast, run and synced in float, then returned as double
                                             // for comparison; bfloat16 is the CUDA backend's (refused here)
  // Replicated hot experts (expert_replication.hpp): per global block (layers, then MTP depths), the plan its MoE
  // layer runs with; empty: none.
  std::vector<ReplicationPlan> replication{};
  // Whole steps (RankTrainer): replica slots per layer, each step's plans made from the previous step's expert
  // counts (plan_replicas); the first step of a run, or of a resumed run, has no previous counts and runs unreplicated.
  int hot_expert_slots = 0;
  // Wave-scheduled EP (expert_waves.hpp): the routed experts of every MoE layer in this many waves; 1: unwaved.
  int expert_waves = 1;
};

// The plan of global block `block` (null when the options replicate nothing). Throws std::invalid_argument when
// the options have plans but not one per block.
const ReplicationPlan* replication_of(const StepOptions& options, int block);

struct RankStep {
  ModelShard<double> grads;                            // this rank's shard of dJ/dθ after synchronisation
  double objective = 0;                                // J, reduced over the world
  double global_tokens = 0;                            // N, the valid tokens of the global batch
  std::vector<int> layers;                             // global block index of each of this rank's layers (its
                                                       // stage's, then its MTP depths': num_layers + k − 1)
  std::vector<std::vector<std::int64_t>> bias_counts;  // per rank layer [E], summed over tp×dp×cp and the batch
  std::vector<Vector<double>> expert_bias_updated;     // per rank layer; empty where the layer has no update
};

RankStep train_step(const ModelConfig& config, const ModelShard<double>& shard, const GlobalBatch& batch,
                    const ProcessGroups& groups, const RankGroups& comms, const StepOptions& options);

}  // namespace moe::dist
