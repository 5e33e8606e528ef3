#include "fuzz/checkpoint_model.hpp"

#include "distributed/check/differential_check.hpp"
#include "distributed/comm/inproc_world.hpp"
#include "distributed/train/rank_trainer.hpp"

namespace moe::fuzz {

ModelConfig checkpoint_model() {
  ModelConfig m;
  MoeConfig& c = m.layer;
  c.hidden = 4;
  c.num_experts = 2;
  c.topk = 1;
  c.ffn_hidden = 2;
  c.score_function = ScoreFunction::sqrtsoftplus;
  c.expert_bias = true;
  c.bias_update_rate = 1e-2;
  c.shared_expert_ffn_hidden = 2;
  c.shared_expert_gate = true;
  c.aux_loss_type = AuxLossType::seq_aux;
  c.aux_loss_coeff = 0.05;
  m.num_layers = 2;
  m.n_hash_layers = 1;
  m.vocab = 8;
  return m;
}

void write_checkpoint(const std::filesystem::path& dir) {
  const ModelConfig config = checkpoint_model();
  const ModelParams<double> params = random_model_params<double>(config, 7);
  const GlobalBatch batch = random_global_batch(config, 4, 4, 8, {});
  ParallelLayout layout;
  layout.world = 2;
  layout.tp = 2;
  layout.ep = 2;
  layout.etp = 1;
  dist::StepOptions options;
  dist::OptimizerSettings optimizer;
  optimizer.config.kind = OptimizerKind::adam;
  optimizer.config.adam = {1e-2, 0.9, 0.95, 1e-8, 0.01};
  std::filesystem::create_directories(dir);
  InprocWorld(layout.world).run([&](Communicator& world) {
    const ProcessGroups groups(layout);
    const dist::RankGroups comms(world, groups);
    dist::RankTrainer trainer(config, params, groups, comms, options, optimizer);
    trainer.step(batch);
    trainer.save(dir.string(), world);
  });
}

}  // namespace moe::fuzz
