#include "distributed/tests/kernel_backend_cases.hpp"

#include "reference/presets.hpp"

namespace moe::dist {

std::vector<BackendCase> kernel_backend_cases() {
  std::vector<BackendCase> out;
  const std::vector<std::pair<std::string, ParallelLayout>> layouts = {
      {"ep2_etp2", ParallelLayout{.world = 4, .ep = 2, .etp = 2}},
      {"tp2_cp2_ep4_etp2", ParallelLayout{.world = 8, .tp = 2, .cp = 2, .ep = 4, .etp = 2}},
      {"pp2_ep2_etp2", ParallelLayout{.world = 8, .pp = 2, .ep = 2, .etp = 2}}};
  for (auto kind : all_values<DispatcherKind>()) {
    const std::string k(to_string(kind));
    for (const auto& [name, layout] : layouts) out.push_back({k + "_" + name, layout, kind});
    out.push_back({k + "_ep4_float", ParallelLayout{.world = 4, .ep = 4}, kind, Precision::float32});
  }
  out.push_back({"single_rank", ParallelLayout{.world = 1}});
  const ParallelLayout ep2_etp2{.world = 4, .ep = 2, .etp = 2};
  out.push_back({"clamp_active_gate_latent", ep2_etp2, DispatcherKind::alltoall, Precision::float64,
                 [](ModelConfig& m) {
                   m.layer.swiglu_clamp = 0.05;  // below typical pre-activations: the clamp's mask matters
                   m.layer.shared_expert_clamp = true;
                   m.layer.shared_expert_gate = true;
                   m.layer.latent_size = 16;
                 }});
  out.push_back({"probs_on_input_k1", ep2_etp2, DispatcherKind::flex, Precision::float64, [](ModelConfig& m) {
                   m.layer.topk = 1;
                   m.layer.apply_probs_on_input = true;
                 }});
  out.push_back({"drop_and_pad", ParallelLayout{.world = 4, .ep = 4}, DispatcherKind::allgather, Precision::float64,
                 [](ModelConfig& m) {
                   m.layer.capacity_factor = 1.0;
                   m.layer.drop_policy = DropPolicy::position;
                   m.layer.pad_to_capacity = true;
                 }});
  return out;
}

CheckProblem backend_problem(const BackendCase& c, const KernelBackend& kernels) {
  CheckProblem p;
  const LayerPreset& preset = layer_preset("tiny-v4");
  p.config.layer = preset.config;
  p.config.num_layers = 2;
  p.config.n_hash_layers = 1;
  p.config.vocab = preset.vocab;
  c.change(p.config);
  p.config.validate();
  p.params = random_model_params<double>(p.config, 61);
  p.batch = random_global_batch(p.config, 8, 8, 62, {0, 3, 0, 1, 0, 0, 5, 8});
  p.layout = c.layout;
  p.options.dispatcher = c.dispatcher;
  p.options.kernels = &kernels;
  p.options.precision = c.precision;
  p.tolerance = tolerance(Compared::training_step, c.precision);
  return p;
}

}  // namespace moe::dist
