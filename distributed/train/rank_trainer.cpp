#include "distributed/train/rank_trainer.hpp"

#include <stdexcept>

namespace moe::dist {
namespace {

// Whole-tensor moments of this rank's shard, cut from the global moments (laid out like parameters).
ShardMoments shard_moments(const ModelConfig& config, const TrainingState& state, const ProcessGroups& groups,
                           int rank) {
  ShardMoments out;
  out.step = state.optimizer_step;
  if (!state.has_moments) return out;
  for (const ModelParams<double>* which : {&state.adam_m, &state.adam_v}) {
    ModelShard<double> s = shard_model(config, *which, groups, rank);
    auto& target = which == &state.adam_m ? out.m : out.v;
    for (const auto& t : shard_tensors(s, 0)) target.emplace_back(t.data, t.data + t.size);
  }
  return out;
}

}  // namespace

RankTrainer::RankTrainer(const ModelConfig& config, const ModelParams<double>& global, const ProcessGroups& groups,
                         const RankGroups& comms, const StepOptions& options, const OptimizerSettings& optimizer)
    : config_(config),
      groups_(groups),
      comms_(comms),
      options_(options),
      shard_(shard_model(config, global, groups, comms.rank)),
      optimizer_(config, optimizer, groups, comms, shard_, options.mode) {
  options_.synchronise = false;  // the optimizer synchronises
  if (options.precision != Precision::float64)
    throw std::invalid_argument("whole training steps run in double (the optimizer keeps double state)");
  // The layers refuse waves with replicas only once a plan exists (step 2): refuse before the first step.
  if (options.hot_expert_slots > 0 && options.expert_waves > 1)
    throw std::invalid_argument("replicated hot experts do not run with wave-scheduled experts");
}

RankTrainer::RankTrainer(const ModelConfig& config, const TrainingState& state, const ProcessGroups& groups,
                         const RankGroups& comms, const StepOptions& options, const OptimizerSettings& optimizer)
    : RankTrainer(config, state.params, groups, comms, options, optimizer) {
  const OptimizerKind kind = optimizer.config.kind;
  auto name = [](OptimizerKind k) { return std::string(k == OptimizerKind::muon ? "Muon" : "Adam"); };
  if (kind != OptimizerKind::sgd && !state.has_moments && state.optimizer_step > 0)
    throw std::runtime_error("checkpoint: " + name(kind) + " needs moments but the checkpoint has none (written by SGD?)");
  if (kind != OptimizerKind::sgd && state.has_moments && state.moments_of != kind)
    throw std::runtime_error("checkpoint: its moments were written by " + name(state.moments_of) +
                             ", this run's optimizer is " + name(kind));
  optimizer_.set_moments(shard_moments(config, state, groups, comms.rank));
  steps_ = state.training_step;
}

double RankTrainer::step(const GlobalBatch& batch) {
  RankStep s = train_step(config_, shard_, batch, groups_, comms_, options_);
  optimizer_.step(s.grads, s.global_tokens);
  for (size_t li = 0; li < s.expert_bias_updated.size(); ++li) {
    if (s.expert_bias_updated[li].size() == 0) continue;
    const size_t layers = shard_.layers.size();  // then the MTP depths
    (li < layers ? shard_.layers[li] : shard_.mtp[li - layers].layer).expert_bias = s.expert_bias_updated[li];
  }
  if (options_.hot_expert_slots > 0) plan_next_step(s);
  ++steps_;
  return s.objective;
}

void RankTrainer::plan_next_step(const RankStep& s) {
  // Every rank of a stage holds the same counts (summed over tp×dp×cp), so the EP peers make the same plans; blocks
  // of other stages get empty plans (this rank never runs them).
  options_.replication.assign(static_cast<size_t>(config_.num_layers + config_.mtp_depth), ReplicationPlan{});
  for (size_t li = 0; li < s.layers.size(); ++li)
    options_.replication[static_cast<size_t>(s.layers[li])] =
        plan_replicas(s.bias_counts[li], groups_.layout().ep, options_.hot_expert_slots);
}

void RankTrainer::save(const std::string& dir, Communicator& world) {
  save_checkpoint(dir, world, config_, groups_, shard_, optimizer_.moments(), steps_);
}

}  // namespace moe::dist
