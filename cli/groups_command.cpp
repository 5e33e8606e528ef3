// `moe-oracle groups`: for a layout and a rank, every process group it belongs to and the routed experts it holds;
// with --grid, the coordinates of every rank of its pipeline stage in both meshes. The groups of GTP/EGTP layouts
// are checked against Megatron's own (megatron_bridge/group_checks.py).
#include "cli/commands.hpp"
#include "cli/model_options.hpp"
#include "cli/text_format.hpp"
#include "reference/presets.hpp"
#include "reference/process_groups.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

namespace moe::cli {
namespace {

struct GroupsOptions {
  ParallelLayout layout;
  ModelOptions model;
  int rank = 0;
  bool grid = false;
  bool json = false;
};

// Members in one line: short groups in full, arithmetic progressions as "first, second, …, last (step s)".
std::string format_ranks(const std::vector<int>& ranks) {
  std::string text;
  const auto join = [&](std::size_t from, std::size_t to) {
    for (std::size_t i = from; i < to; ++i) text += (text.empty() ? "" : ", ") + std::to_string(ranks[i]);
  };
  if (ranks.size() <= 8) {
    join(0, ranks.size());
    return text;
  }
  const int step = ranks[1] - ranks[0];
  bool progression = true;
  for (std::size_t i = 1; i < ranks.size(); ++i) progression = progression && ranks[i] - ranks[i - 1] == step;
  if (!progression) {
    join(0, 4);
    return text + ", …, " + std::to_string(ranks.back()) + " (" + std::to_string(ranks.size()) + " ranks)";
  }
  join(0, 2);
  return text + ", …, " + std::to_string(ranks.back()) + " (step " + std::to_string(step) + ")";
}

std::string format_experts(const ExpertRange& e) {
  return e.count == 1 ? std::to_string(e.first)
                      : std::to_string(e.first) + "–" + std::to_string(e.first + e.count - 1);
}

// A stage is the dense tp-dp-cp group: every axis but pp.
std::vector<int> stage_ranks(const ProcessGroups& g, int rank) {
  auto ranks = g.group(GroupKind::tp_dp_cp, rank);
  std::sort(ranks.begin(), ranks.end());
  return ranks;
}

void run(const GroupsOptions& a) {
  const ProcessGroups g(a.layout);
  const LayerPreset preset = a.model.resolve();
  const int num_experts = preset.config.num_experts;
  if (a.rank < 0 || a.rank >= a.layout.world)
    throw std::invalid_argument("rank rule: --rank " + std::to_string(a.rank) + " is outside [0, " +
                                std::to_string(a.layout.world) + ")");
  const int stage = g.rank_in(GroupKind::pp, a.rank);
  const auto experts = g.experts_of(a.rank, num_experts);

  if (a.json) {
    nlohmann::json out = {{"layout", layout_json(a.layout)},
                          {"moe_oracle", MOE_ORACLE_VERSION},
                          {"model", a.model.source()},
                          {"num_experts", num_experts},
                          {"rank", a.rank},
                          {"stage", stage},
                          {"experts", {{"first", experts.first}, {"count", experts.count}}}};
    for (GroupKind kind : all_group_kinds())
      out["groups"][std::string(to_string(kind))] = {{"ranks", g.group(kind, a.rank)},
                                                     {"rank_in_group", g.rank_in(kind, a.rank)},
                                                     {"mesh", is_expert_group(kind) ? "expert" : "dense"}};
    if (a.grid) {
      out["grid"] = nlohmann::json::array();
      for (int r : stage_ranks(g, a.rank)) {
        const auto e = g.experts_of(r, num_experts);
        out["grid"].push_back({{"rank", r},
                               {"tp", g.rank_in(GroupKind::tp, r)},
                               {"cp", g.rank_in(GroupKind::cp, r)},
                               {"dp", g.rank_in(GroupKind::dp, r)},
                               {"expt_tp", g.rank_in(GroupKind::expt_tp, r)},
                               {"ep", g.rank_in(GroupKind::ep, r)},
                               {"expt_dp", g.rank_in(GroupKind::expt_dp, r)},
                               {"gtp", g.rank_in(GroupKind::gtp, r)},
                               {"expt_gtp", g.rank_in(GroupKind::expt_gtp, r)},
                               {"experts", {{"first", e.first}, {"count", e.count}}}});
      }
    }
    std::cout << out.dump(2) << "\n";
    return;
  }

  std::cout << "layout: " << describe(a.layout) << "\n";
  std::cout << "rank " << a.rank << ": pipeline stage " << stage << ", ep rank " << g.rank_in(GroupKind::ep, a.rank)
            << ", holds routed experts " << format_experts(experts) << " of " << num_experts << " (" << preset.name
            << ", " << experts.count << " per rank per MoE layer)\n\n";
  if (a.grid) {
    // The GTP coordinates appear only when a GTP axis is on (they are all 0 otherwise).
    const bool gtp = a.layout.gtp > 1 || a.layout.egtp > 1;
    std::cout << "stage " << stage << ": dense coordinates (tp, cp, dp" << (gtp ? ", gtp" : "")
              << ") and expert coordinates (expt_tp, ep, expt_dp" << (gtp ? ", expt_gtp" : "") << ") of every rank\n";
    std::vector<std::string> header{"rank", "tp", "cp", "dp"};
    if (gtp) header.push_back("gtp");
    for (const char* column : {"expt_tp", "ep", "expt_dp"}) header.push_back(column);
    if (gtp) header.push_back("expt_gtp");
    header.push_back("experts");
    TextTable table(header);
    const auto at = [&](GroupKind kind, int r) { return std::to_string(g.rank_in(kind, r)); };
    for (int r : stage_ranks(g, a.rank)) {
      std::vector<std::string> row{std::to_string(r), at(GroupKind::tp, r), at(GroupKind::cp, r), at(GroupKind::dp, r)};
      if (gtp) row.push_back(at(GroupKind::gtp, r));
      for (GroupKind kind : {GroupKind::expt_tp, GroupKind::ep, GroupKind::expt_dp}) row.push_back(at(kind, r));
      if (gtp) row.push_back(at(GroupKind::expt_gtp, r));
      row.push_back(format_experts(g.experts_of(r, num_experts)));
      table.add_row(row);
    }
    table.print(std::cout);
    return;
  }
  TextTable table({"group", "mesh", "size", "rank in group", "members"});
  for (GroupKind kind : all_group_kinds()) {
    const auto members = g.group(kind, a.rank);
    table.add_row({std::string(to_string(kind)), is_expert_group(kind) ? "expert" : "dense",
                   std::to_string(members.size()), std::to_string(g.rank_in(kind, a.rank)), format_ranks(members)});
  }
  table.print(std::cout);
}

}  // namespace

void add_groups_command(CLI::App& app) {
  auto args = std::make_shared<GroupsOptions>();
  auto* cmd = app.add_subcommand("groups", "Process groups of a rank and the routed experts it holds (Megatron's "
                                           "RankGenerator; dense mesh ep = 1, expert mesh cp = 1)");
  add_layout_flags(*cmd, args->layout, true);
  args->model.default_preset = "v4-pro";
  add_model_options(*cmd, args->model);  // the model gives the number of routed experts
  cmd->add_option("--rank", args->rank, "global rank to describe")->capture_default_str();
  cmd->add_flag("--grid", args->grid, "print every rank of the rank's pipeline stage as a table");
  cmd->add_flag("--json", args->json, "machine-readable output");
  cmd->callback([args, cmd] {
    finish_layout(*cmd, args->layout);
    run(*args);
  });
}

}  // namespace moe::cli
