// moe-oracle: does a parallel MoE system compute exactly what the single-device model computes?
#include "cli/commands.hpp"
#include "cli/report_output.hpp"

#include <malloc.h>

#include <cmath>
#include <exception>
#include <filesystem>
#include <iostream>
#include <limits>
#include <stdexcept>
#include <string>

namespace {

// Every value given on the command line must say something: an empty string is not a seed, NaN or Inf is not a
// tolerance, a size or a learning rate. One guard for every option of every command (flags take no value).
void refuse_empty_and_non_finite(CLI::App& app) {
  for (CLI::Option* opt : app.get_options()) {
    if (opt->get_type_size_max() == 0) continue;  // a flag
    const bool real = opt->get_type_name().find("FLOAT") != std::string::npos;
    opt->check(CLI::Validator(
        [real](std::string& value) -> std::string {
          if (value.empty()) return "an empty value";
          if (!real) return {};
          try {
            if (!std::isfinite(std::stod(value))) return "'" + value + "' is not a finite number";
          } catch (const std::out_of_range&) {
            return "'" + value + "' is out of range";
          } catch (const std::invalid_argument&) {
          }  // not a number at all: the conversion says so
          return {};
        },
        ""));
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) refuse_empty_and_non_finite(*sub);
}

// The oracle's long commands allocate and free buffers of hundreds of MB again and again (an expert's weights, its
// rows, its gradients: compare visits 256 experts of a V4-Flash layer). glibc serves a block above its mmap threshold
// (at most 32 MB) with a fresh mapping and unmaps it when freed, so the kernel faults in and clears every page of the
// next one again: on a V4-Flash-shaped compare that was 45% of the CPU time (system time 56 s of 125 s at 32
// experts). Served from the heap and kept there when freed, the next block reuses the pages. The heap keeps its high
// water mark, which a long command reaches anyway.
void keep_freed_memory_for_reuse() {
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
}

// Parses the command line and runs the command; the exit status (0 pass, 1 a mismatch, 2 refused input or an
// error), every error said in one line on stderr.
int run_command(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // 0 help, 1 a mismatch (a command's CLI::RuntimeError(1)); every usage error is 2, as for bad input below.
    const int code = app.exit(e);
    return code <= 1 ? code : 2;
  } catch (const std::filesystem::filesystem_error& e) {
    // A path that cannot be walked (a symlink loop, no permission): the path and the reason, not the library's
    // "filesystem error: status: …" with the path in brackets at the end.
    std::cerr << "moe-oracle: error: " + (e.path1().empty() ? std::string("a path") : e.path1().string()) + ": " +
                     e.code().message() + "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << std::string("moe-oracle: error: ") + e.what() + "\n";  // one write: ranks of a job interleave
    return 2;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  keep_freed_memory_for_reuse();
  CLI::App app{"moe-oracle: differential testing of parallel Mixture-of-Experts layers against a CPU oracle"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("moe-oracle ") + MOE_ORACLE_VERSION);
  moe::cli::add_check_command(app);
  moe::cli::add_checkpoint_command(app);
  moe::cli::add_compare_command(app);
  moe::cli::add_config_command(app);
  moe::cli::add_bench_command(app);
  moe::cli::add_layer_command(app);
  moe::cli::add_quant_command(app);
  moe::cli::add_golden_command(app);
  moe::cli::add_groups_command(app);
  moe::cli::add_scaling_command(app);
  moe::cli::add_semantics_command(app);
  moe::cli::add_explain_command(app);
  moe::cli::add_step_command(app);
  moe::cli::add_volume_command(app);
  refuse_empty_and_non_finite(app);
  const int status = run_command(app, argc, argv);
  // Whatever the verdict, a report that did not reach standard output makes it 2 (cli/report_output.hpp).
  try {
    moe::cli::finish_standard_output();
  } catch (const moe::cli::ReportLost& e) {
    std::cerr << std::string("moe-oracle: error: ") + e.what() + "\n";
    return 2;
  }
  return status;
}
