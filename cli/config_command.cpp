// `moe-oracle config`: the oracle's MoE layer for a model (a preset, or a file: ours, a golden case, a Hugging Face
// config.json), as the golden config keys that a dump's or a case's "config" holds (golden/README.md). The answer is
// model_files::layer_config_answer, which the Python capture of a Hugging Face block (python/moe_capture_hf.py) gets
// from the moe_oracle module: the mapping of a config.json exists once, in model_files/, and a dump says what the
// model's files define, not what the captured code happened to do. The text form prints the same answer.
#include "cli/commands.hpp"
#include "cli/model_options.hpp"
#include "cli/run_options.hpp"
#include "model_files/layer_config_answer.hpp"

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
  const nlohmann::ordered_json answer =
      model_files::layer_config_answer(p, a.model.source(), semantics, a.model.notes(semantics));
  if (a.json) {
    std::cout << answer.dump(2) << "\n";
    return;
  }
  std::cout << "model     " << answer["model"].get<std::string>() << "\nsemantics " << semantics.spec()
            << "\nconfig    " << answer["config"].dump() << "\n";
  if (p.n_hash_layers > 0)
    std::cout << "hash layers (the first " << p.n_hash_layers << " of " << p.num_layers
              << "): " << answer["hash_layer_config"].dump() << "\n";
  for (const auto& note : answer["notes"]) std::cout << "note: " << note.get<std::string>() << "\n";
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
