// Each subcommand of `moe-oracle` lives in its own file and registers itself on the app here.
// A command's callback throws on bad input; main() turns exceptions into one error line and exit status 2.
#pragma once

#include <CLI/CLI.hpp>

namespace moe::cli {

void add_bench_command(CLI::App& app);
void add_check_command(CLI::App& app);
void add_checkpoint_command(CLI::App& app);
void add_compare_command(CLI::App& app);
void add_config_command(CLI::App& app);
void add_layer_command(CLI::App& app);
void add_quant_command(CLI::App& app);
void add_golden_command(CLI::App& app);
void add_groups_command(CLI::App& app);
void add_scaling_command(CLI::App& app);
void add_semantics_command(CLI::App& app);
void add_explain_command(CLI::App& app);
void add_step_command(CLI::App& app);
void add_volume_command(CLI::App& app);

}  // namespace moe::cli
