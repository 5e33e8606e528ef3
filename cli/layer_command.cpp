// `moe-oracle layer`: runs the layer oracle alone on a preset and prints what every backend is compared with:
// the routing, the outputs, the losses and the norm of every gradient.
#include "cli/cli_checks.hpp"
#include "cli/commands.hpp"
#include "cli/model_options.hpp"
#include "cli/run_options.hpp"
#include "reference/moe_layer.hpp"
#include "reference/presets.hpp"
#include "reference/random_init.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

namespace moe::cli {
namespace {

struct LayerOptions {
  ModelOptions model;
  Semantics semantics;
  int seq = 0;    // 0 = the preset's
  int batch = 0;  // 0 = the preset's
  std::uint64_t seed = 1;
  ExpertPath path = ExpertPath::expert_batched;
  bool json = false;
};

struct TensorNorm {
  std::string name;
  std::string shape;
  double norm;
  double max_abs;
};

template <typename M>
TensorNorm norm_of(const std::string& name, const M& m) {
  return {name, "[" + std::to_string(m.rows()) + ", " + std::to_string(m.cols()) + "]", m.norm(),
          m.size() ? m.cwiseAbs().maxCoeff() : 0.0};
}

TensorNorm norm_of_experts(const std::string& name, const std::vector<Matrix<double>>& ms) {
  double sq = 0, mx = 0;
  for (const auto& m : ms) {
    sq += m.squaredNorm();
    mx = std::max(mx, m.cwiseAbs().maxCoeff());
  }
  return {name, std::to_string(ms.size()) + " x [" + std::to_string(ms.front().rows()) + ", " +
                    std::to_string(ms.front().cols()) + "]",
          std::sqrt(sq), mx};
}

std::vector<TensorNorm> gradient_norms(const MoeConfig& c, const MoeGradients<double>& g) {
  std::vector<TensorNorm> rows{norm_of("grad x", g.x), norm_of("grad router_weight", g.params.router_weight),
                               norm_of_experts("grad expert_fc1", g.params.expert_fc1),
                               norm_of_experts("grad expert_fc2", g.params.expert_fc2)};
  if (c.has_shared_expert()) {
    rows.push_back(norm_of("grad shared_fc1", g.params.shared_fc1));
    rows.push_back(norm_of("grad shared_fc2", g.params.shared_fc2));
  }
  if (c.shared_expert_gate) rows.push_back(norm_of("grad shared_gate", g.params.shared_gate));
  if (c.latent_size > 0) {
    rows.push_back(norm_of("grad latent_down", g.params.latent_down));
    rows.push_back(norm_of("grad latent_up", g.params.latent_up));
  }
  return rows;
}

std::string describe(const MoeConfig& c) {
  std::string s = "h " + std::to_string(c.hidden) + ", E " + std::to_string(c.num_experts) + ", top-" +
                  std::to_string(c.topk) + ", d " + std::to_string(c.ffn_hidden) + ", " +
                  std::string(to_string(c.score_function)) + " (" + std::string(to_string(c.normalization)) + ")";
  char buf[64];
  std::snprintf(buf, sizeof buf, ", α %g", c.topk_scaling_factor);
  s += buf;
  if (c.expert_bias) s += ", expert bias";
  if (c.num_groups) s += ", groups " + std::to_string(c.num_groups) + " keep " + std::to_string(c.group_topk);
  if (c.swiglu_clamp) s += ", clamp " + std::to_string(static_cast<int>(*c.swiglu_clamp));
  if (c.has_shared_expert()) s += ", shared " + std::to_string(c.shared_expert_ffn_hidden);
  if (c.aux_loss_type != AuxLossType::none) s += ", " + std::string(to_string(c.aux_loss_type));
  return s;
}

void print_human(const LayerPreset& p, const MoeConfig& c, const LayerOptions& o, const MoeParams<double>& params,
                 const MoeForward<double>& f, const std::vector<TensorNorm>& grads) {
  for (const auto& note : o.model.notes(o.semantics)) std::printf("note: %s\n", note.c_str());
  std::printf("moe-oracle layer: one MoE layer through the oracle (double precision, one process)\n\n");
  std::printf("model    %s: %s\nconfig   %s\nsemantics %s\nbatch    seq %d × batch %d = %lld tokens, seed %llu, "
              "double\n\n",
              o.model.source().c_str(), p.description.c_str(), describe(c).c_str(), c.semantics.spec().c_str(), o.seq, o.batch,
              static_cast<long long>(f.y.rows()), static_cast<unsigned long long>(o.seed));

  std::printf("routing  %-8s", "expert");
  for (int e = 0; e < c.num_experts; ++e) std::printf("%4d", e);
  std::printf("\n         %-8s", "tokens");
  for (auto n : f.routing.tokens_per_expert) std::printf("%4lld", static_cast<long long>(n));
  if (c.bias_update_rate) {
    // Direction of one bias update: + for underloaded experts, − for overloaded ones.
    std::printf("\n         %-9s", "bias Δ");
    for (int e = 0; e < c.num_experts; ++e) {
      const double d = f.expert_bias_updated(e) - params.expert_bias(e);
      std::printf("%4s", d > 0 ? "+" : (d < 0 ? "-" : "0"));
    }
  }
  std::printf("\n\n%-22s %-16s %14s %14s\n", "tensor", "shape", "norm", "max |·|");
  const auto y = norm_of("y", f.y);
  std::printf("%-22s %-16s %14.8e %14.8e\n", y.name.c_str(), y.shape.c_str(), y.norm, y.max_abs);
  for (const auto& g : grads)
    std::printf("%-22s %-16s %14.8e %14.8e\n", g.name.c_str(), g.shape.c_str(), g.norm, g.max_abs);
  std::printf("\nlosses   aux (%s) = %.12e   z = %.12e\n", std::string(to_string(c.aux_loss_type)).c_str(),
              f.aux_loss, f.z_loss);
  std::printf("backward L = Σ⟨grad_y, y⟩ + aux + z, grad_y drawn from the seed\n");
}

}  // namespace

void add_layer_command(CLI::App& app) {
  auto o = std::make_shared<LayerOptions>();
  auto* cmd = app.add_subcommand("layer", "Run one MoE layer through the oracle and print its outputs and gradients");
  add_model_options(*cmd, o->model);
  cmd->add_option("--seq,--seq-length", o->seq, "sequence length (default: the model's)")
      ->check(whole_at_least(1));
  cmd->add_option("--micro-batch,--micro-batch-size", o->batch, "sequences per micro-batch (default: the model's)")
      ->check(whole_at_least(1));
  cmd->add_option("--seed", o->seed, "seed of parameters, inputs and grad_y")
      ->capture_default_str()
      ->check(seed_value());
  add_semantics_option(*cmd, o->semantics);
  add_oracle_path_option(*cmd, o->path);
  cmd->add_flag("--json", o->json, "machine-readable output");
  cmd->callback([o] {
    const LayerPreset p = o->model.resolve(o->semantics);
    MoeConfig config = p.config;
    config.semantics = o->semantics;
    LayerOptions opt = *o;
    if (opt.seq == 0) opt.seq = p.seq;
    if (opt.batch == 0) opt.batch = p.batch;
    require_fits(layer_memory(config, static_cast<double>(opt.seq) * opt.batch), "the layer of " + o->model.source(),
                 "run a test-size model, or give smaller --hidden-size / --num-experts / --moe-ffn-hidden-size");
    note_long_work(layer_flops(config, static_cast<double>(opt.seq) * opt.batch), opt.path);

    const auto params = random_params<double>(config, p.vocab, opt.seed);
    const auto inputs = random_inputs<double>(config, opt.seq, opt.batch, p.vocab, opt.seed + 1);
    const auto grad_y = random_grad_y<double>(config, opt.seq * opt.batch, opt.seed + 2);
    const auto forward = moe_forward(config, params, inputs, opt.path);
    const auto grads = moe_backward(config, params, inputs, forward, grad_y, {}, opt.path);
    const auto norms = gradient_norms(config, grads);

    if (!opt.json) {
      print_human(p, config, opt, params, forward, norms);
      return;
    }
    nlohmann::json j;
    j["moe_oracle"] = MOE_ORACLE_VERSION;
    j["model"] = o->model.source();
    j["semantics"] = config.semantics.spec();
    j["seq"] = opt.seq;
    j["batch"] = opt.batch;
    j["seed"] = opt.seed;
    j["oracle_path"] = std::string(to_string(opt.path));
    j["tokens_per_expert"] = forward.routing.tokens_per_expert;
    j["aux_loss"] = forward.aux_loss;
    j["z_loss"] = forward.z_loss;
    auto add = [&](const TensorNorm& t) {
      j["tensors"][t.name] = {{"shape", t.shape}, {"norm", t.norm}, {"max_abs", t.max_abs}};
    };
    add(norm_of("y", forward.y));
    for (const auto& t : norms) add(t);
    if (p.config.bias_update_rate)
      j["expert_bias_updated"] = std::vector<double>(forward.expert_bias_updated.data(),
                                                     forward.expert_bias_updated.data() + p.config.num_experts);
    std::cout << j.dump(2) << "\n";
  });
}

}  // namespace moe::cli
