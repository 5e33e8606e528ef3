// `moe-oracle config`: the oracle's MoE layer for a model (a preset, or a file: ours, a golden case, a Hugging Face
// config.json), as the golden config keys that a dump's or a case's "config" holds (golden/README.md). A capture of
// a live block (python/moe_capture.py) writes this, so the mapping of a config.json exists once, in
// tools/hf_config.cpp, and a dump says what the model's files define, not what the captured code happened to do.
#include "cli/commands.hpp"
#include "cli/model_options.hpp"
#include "cli/run_options.hpp"
#include "formats/config_json.hpp"
#include "reference/model.hpp"

#include <nlohmann/json.hpp>

#include <iostream>
#include <memory>
#include <string>

namespace moe::cli {
namespace {

struct ConfigOptions {
  ModelOptions model;
  Semantics semantics;
  bool json = false;
};

void run(const ConfigOptions& a) {
  const Semantics& semantics = a.semantics;
  const LayerPreset p = a.model.resolve(semantics);
  ModelConfig m;
  m.layer = p.config;
  m.num_layers = p.num_layers;
  m.n_hash_layers = p.n_hash_layers;
  const auto notes = a.model.notes(semantics);
  if (a.json) {
    nlohmann::ordered_json out;
    out["moe_oracle"] = MOE_ORACLE_VERSION;
    out["model"] = a.model.source();
    out["semantics"] = semantics.spec();
    out["config"] = formats::config_to_json(m.layer_config(m.n_hash_layers));
    // DeepSeek-V4's first blocks route by token id: their config differs (hash_routing on, no bias, no groups).
    out["hash_layer_config"] = nullptr;
    if (m.n_hash_layers > 0) out["hash_layer_config"] = formats::config_to_json(m.layer_config(0));
    out["num_layers"] = m.num_layers;
    out["n_hash_layers"] = m.n_hash_layers;
    out["notes"] = notes;
    std::cout << out.dump(2) << "\n";
    return;
  }
  std::cout << "model     " << a.model.source() << "\nsemantics " << semantics.spec() << "\nconfig    "
            << formats::config_to_json(m.layer_config(m.n_hash_layers)).dump() << "\n";
  if (m.n_hash_layers > 0)
    std::cout << "hash layers (the first " << m.n_hash_layers << " of " << m.num_layers << "): "
              << formats::config_to_json(m.layer_config(0)).dump() << "\n";
  for (const auto& note : notes) std::cout << "note: " << note << "\n";
}

}  // namespace

void add_config_command(CLI::App& app) {
  auto a = std::make_shared<ConfigOptions>();
  auto* cmd = app.add_subcommand(
      "config", "The oracle's MoE layer of a model as golden config keys (what a dump's \"config\" holds)");
  add_model_options(*cmd, a->model);
  CLI::Option* semantics = add_semantics_option(*cmd, a->semantics);
  semantics->description(semantics->get_description() +
                         "; its mapped deviations change how a Hugging Face config.json is read");
  cmd->add_flag("--json", a->json, "machine-readable output");
  cmd->callback([a] { run(*a); });
}

}  // namespace moe::cli
