// moe-oracle: does a parallel MoE system compute exactly what the single-device model computes?
#include "tools/commands.hpp"

#include <exception>
#include <iostream>

int main(int argc, char** argv) {
  CLI::App app{"moe-oracle: differential testing of parallel Mixture-of-Experts layers against a CPU oracle"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("moe-oracle ") + MOE_ORACLE_VERSION);
  moe::cli::add_check_command(app);
  moe::cli::add_compare_command(app);
  moe::cli::add_bench_command(app);
  moe::cli::add_layer_command(app);
  moe::cli::add_golden_command(app);
  moe::cli::add_groups_command(app);
  moe::cli::add_scaling_command(app);
  moe::cli::add_semantics_command(app);
  moe::cli::add_explain_command(app);
  moe::cli::add_step_command(app);
  moe::cli::add_volume_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // 0 help, 1 a mismatch (a command's CLI::RuntimeError(1)); every usage error is 2, as for bad input below.
    const int code = app.exit(e);
    return code <= 1 ? code : 2;
  } catch (const std::exception& e) {
    std::cerr << "moe-oracle: error: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
