// A small model saved as a checkpoint without training: its shards cut from global parameters, Adam moments
// derived from them (m = p/10, v = p², so v ≥ 0), written by in-process ranks. Two seeds give two distinguishable
// checkpoints of one model (the kill test's old and new versions); `matches` says whether a loaded state is
// exactly the one a seed wrote.
#pragma once

#include "distributed/comm/inproc_world.hpp"
#include "distributed/train/checkpoint.hpp"

#include <filesystem>

namespace moe::dist::test {

inline ModelConfig small_checkpoint_model() {
  ModelConfig m;
  m.layer.hidden = 8;
  m.layer.num_experts = 4;
  m.layer.topk = 2;
  m.layer.ffn_hidden = 4;
  m.layer.score_function = ScoreFunction::sigmoid;
  m.layer.expert_bias = true;
  m.layer.bias_update_rate = 1e-2;
  m.num_layers = 2;
  m.n_hash_layers = 1;  // layer 0 routes by tid2eid
  m.vocab = 16;
  return m;
}

struct CheckpointFixture {
  ModelConfig config = small_checkpoint_model();
  ParallelLayout layout{.world = 2, .ep = 2};

  ModelParams<double> params(std::uint64_t seed) const { return random_model_params<double>(config, seed); }

  // Collective write of the checkpoint of `seed` (training step = optimizer step = seed).
  void save(const std::filesystem::path& dir, std::uint64_t seed) const {
    const ModelParams<double> global = params(seed);
    InprocWorld(layout.world).run([&](Communicator& world) {
      const ProcessGroups groups(layout);
      ModelShard<double> shard = shard_model(config, global, groups, world.rank());
      ShardMoments moments;
      moments.step = static_cast<int>(seed);
      for (const auto& t : shard_tensors(shard, groups.experts_of(world.rank(), config.layer.num_experts).first)) {
        std::vector<double> m(t.data, t.data + t.size), v = m;
        for (double& x : m) x /= 10;
        for (double& x : v) x *= x;
        moments.m.push_back(std::move(m));
        moments.v.push_back(std::move(v));
      }
      save_checkpoint(dir.string(), world, config, groups, shard, moments, static_cast<int>(seed));
    });
  }

  // True when `state` is exactly what save(dir, seed) wrote: steps, every parameter and moment, bias and table.
  bool matches(const TrainingState& state, std::uint64_t seed) const {
    if (state.training_step != static_cast<int>(seed) || state.optimizer_step != static_cast<int>(seed) ||
        !state.has_moments)
      return false;
    ModelParams<double> want = params(seed), got = state.params, m = state.adam_m, v = state.adam_v;
    const auto w = trained_tensors(config, want), g = trained_tensors(config, got);
    const auto gm = trained_tensors(config, m), gv = trained_tensors(config, v);
    if (w.size() != g.size() || w.size() != gm.size() || w.size() != gv.size()) return false;
    for (size_t i = 0; i < w.size(); ++i)
      for (Eigen::Index j = 0; j < w[i].size; ++j) {
        const double p = w[i].data[j];
        if (g[i].data[j] != p || gm[i].data[j] != p / 10 || gv[i].data[j] != p * p) return false;
      }
    for (size_t l = 0; l < want.layers.size(); ++l) {
      if (want.layers[l].expert_bias != got.layers[l].expert_bias) return false;
      if (want.layers[l].tid2eid != got.layers[l].tid2eid) return false;
    }
    return true;
  }
};

}  // namespace moe::dist::test
