// `moe-oracle scaling`: the gradient-scaling table (reference/scaling_rules.hpp) evaluated on a layout and a loss
// mode: per parameter class the pre-scale, collective, group and token division, then the loss weights (CE, aux,
// global_aux, z) — the same rows distributed/train/loss_weights.cpp evaluates — under a semantics profile.
#include "cli/choice_option.hpp"
#include "cli/cli_checks.hpp"
#include "cli/commands.hpp"
#include "cli/model_options.hpp"
#include "cli/run_options.hpp"
#include "cli/text_format.hpp"
#include "reference/scaling_rules.hpp"

#include <nlohmann/json.hpp>

#include <iostream>
#include <memory>
#include <optional>
#include <string>

namespace moe::cli {
namespace {

// The run-time count a loss weight is multiplied by, as a suffix of the value (table).
std::string token_count_suffix(TokenFactor f) {
  return f == TokenFactor::none ? "" : " × " + std::string(to_string(f));
}

// The steps after the data-parallel collective: the SUM over tp, and the GTP axis's step when it has size > 1.
std::string then_steps(const GradSync& r) {
  std::string steps = r.rule.then_sum_over_tp ? "all-reduce SUM over tp (" + std::to_string(r.tp_size) + ")" : "";
  if (r.gtp_size > 1 && r.rule.gtp_step != GtpStep::none)
    steps += (steps.empty() ? "" : "; ") + std::string(to_string(r.rule.gtp_step)) + " over " +
             std::string(to_string(r.gtp_group)) + " (" + std::to_string(r.gtp_size) + ")";
  return steps.empty() ? "-" : steps;
}

struct ScalingOptions {
  ParallelLayout layout;
  LossMode scaling = LossMode::sum;
  Semantics semantics;
  int micro_batch = 1;
  std::optional<int> global_batch;
  bool distributed_optimizer = false;
  bool json = false;
};

void run(const ScalingOptions& a) {
  const ProcessGroups groups(a.layout);
  const LossMode mode = a.scaling;
  const auto sizes = group_sizes(groups);
  const int global_batch = a.global_batch.value_or(a.micro_batch * a.layout.dp_with_gtp());
  const int m = num_microbatches(a.layout, global_batch, a.micro_batch);
  const Semantics& semantics = a.semantics;
  const auto grads = grad_sync_table(mode, sizes, a.distributed_optimizer, semantics);
  const auto losses = loss_scale_table(mode, sizes, m, semantics);
  const auto deviation_names = [](const std::vector<Deviation>& ds) {
    std::vector<std::string> names;
    for (Deviation d : ds) names.emplace_back(deviation_info(d).name);
    return names;
  };

  if (a.json) {
    nlohmann::json out = {{"moe_oracle", MOE_ORACLE_VERSION},
                          {"layout", layout_json(a.layout)},
                          {"loss_mode", to_string(mode)},
                          {"semantics", semantics.spec()},
                          {"group_sizes",
                           {{"tp", sizes.tp}, {"cp", sizes.cp}, {"tp_cp", sizes.tp_cp}, {"dp_cp", sizes.dp_cp},
                            {"expt_dp", sizes.expt_dp}, {"gtp", sizes.gtp}, {"egtp", sizes.egtp}}},
                          {"global_batch", global_batch},
                          {"micro_batch", a.micro_batch},
                          {"num_microbatches", m}};
    for (const auto& r : grads)
      out["gradients"].push_back({{"param_class", to_string(r.rule.param_class)},
                                  {"prescale", r.prescale},
                                  {"prescale_formula", r.prescale_formula},
                                  {"prescale_values", r.prescale_values},
                                  {"collective", r.collective},
                                  {"reduce_op", to_string(r.rule.op)},
                                  {"group", to_string(r.rule.group)},
                                  {"group_size", r.group_size},
                                  {"then_sum_over_tp", r.rule.then_sum_over_tp},
                                  {"gtp_step", to_string(r.rule.gtp_step)},
                                  {"gtp_group", to_string(r.gtp_group)},
                                  {"gtp_group_size", r.gtp_size},
                                  {"gtp_source", r.rule.gtp_source},
                                  {"divide_by_global_tokens", r.rule.divide_by_global_tokens},
                                  {"net_factor", r.net_factor},
                                  {"source", r.rule.source}});
    for (const auto& r : losses)
      out["loss_scales"].push_back({{"term", to_string(r.rule.term)},
                                    {"formula", r.rule.formula},
                                    {"values", r.values},
                                    {"factor", r.factor},
                                    {"token_count", to_string(r.rule.tokens)},
                                    {"deviations", deviation_names(r.rule.when)},
                                    {"divide_by_global_tokens", mode == LossMode::per_token},
                                    {"source", r.rule.source}});
    std::cout << out.dump(2) << "\n";
    return;
  }

  const bool gtp = a.layout.gtp > 1;  // the GTP peers take distinct samples and share the global token count
  std::cout << "layout: " << describe(a.layout) << "\n";
  std::cout << "loss mode " << to_string(mode) << ": |tp| " << sizes.tp << ", |cp| " << sizes.cp << ", |tp_cp| "
            << sizes.tp_cp << ", |dp_cp| " << sizes.dp_cp << ", |expt_dp| " << sizes.expt_dp << ", gtp " << sizes.gtp
            << ", egtp " << sizes.egtp << "; m = B/(b·dp" << (gtp ? "·gtp" : "") << ") = " << global_batch << "/("
            << a.micro_batch << "·" << a.layout.dp() << (gtp ? "·" + std::to_string(a.layout.gtp) : "") << ") = " << m
            << "\n\n";
  TextTable grad_table({"param class", "pre-scale", "value", "collective", "group", "then", "÷ global tokens",
                        "net factor"});
  for (const auto& r : grads) {
    grad_table.add_row({std::string(to_string(r.rule.param_class)),
                        r.prescale_formula == r.prescale_values ? r.prescale_formula
                                                                : r.prescale_formula + " = " + r.prescale_values,
                        trimmed(r.prescale, 8),
                        r.collective + " " + std::string(to_string(r.rule.op)),
                        std::string(to_string(r.rule.group)) + " (" + std::to_string(r.group_size) + ")",
                        then_steps(r),
                        r.rule.divide_by_global_tokens
                            ? std::string("yes (count all-reduced over ") + (gtp ? "dp_cp_gtp)" : "dp_cp)")
                            : "no",
                        trimmed(r.net_factor, 8)});
  }
  grad_table.print(std::cout);
  std::cout << "(net factor: what the plain sum of the group's gradients is multiplied by)\n\n";

  std::cout << "loss weights of one rank's microbatch, semantics " << semantics.spec() << ":\n";
  TextTable loss_table({"loss term", "weight", "value", "÷ global tokens", "deviation"});
  for (const auto& r : losses) {
    std::string deviations;
    for (const auto& name : deviation_names(r.rule.when)) deviations += (deviations.empty() ? "" : ", ") + name;
    loss_table.add_row({std::string(to_string(r.rule.term)), std::string(r.rule.formula) + " = " + r.values,
                        trimmed(r.factor, 8) + token_count_suffix(r.rule.tokens),
                        mode == LossMode::per_token ? "yes" : "no", deviations.empty() ? "-" : deviations});
  }
  loss_table.print(std::cout);

  std::cout << "\nsources (Megatron-Core, megatron/core/ unless a path says otherwise):\n";
  for (const auto& r : grads) {
    std::cout << "  " << to_string(r.rule.param_class) << ": " << r.rule.source << "\n";
    if (r.gtp_size > 1) std::cout << "  " << to_string(r.rule.param_class) << ", GTP axis: " << r.rule.gtp_source << "\n";
  }
  for (const auto& r : losses) std::cout << "  " << to_string(r.rule.term) << ": " << r.rule.source << "\n";
}

}  // namespace

void add_scaling_command(CLI::App& app) {
  auto args = std::make_shared<ScalingOptions>();
  auto* cmd = app.add_subcommand("scaling", "Gradient-scaling rules for a layout and loss mode: pre-scale, "
                                            "collective, group, token division; aux/z-loss backward scales");
  add_layout_flags(*cmd, args->layout, true);
  add_choice(*cmd, "--scaling", args->scaling, "loss mode");
  add_semantics_option(*cmd, args->semantics);
  cmd->add_option("--micro-batch,--micro-batch-size", args->micro_batch, "samples per microbatch (b)")
      ->capture_default_str()
      ->check(whole_at_least(1));
  cmd->add_option("--global-batch,--global-batch-size", args->global_batch,
                  "samples per global batch (B); default b·dp, one microbatch")
      ->check(whole_at_least(1));
  cmd->add_flag("--distributed-optimizer", args->distributed_optimizer,
                "gradients are reduce-scattered (distributed optimizer) instead of all-reduced");
  cmd->add_flag("--json", args->json, "machine-readable output");
  cmd->callback([args, cmd] {
    finish_layout(*cmd, args->layout);
    run(*args);
  });
}

}  // namespace moe::cli
