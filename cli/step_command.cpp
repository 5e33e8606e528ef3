// `moe-oracle step` — teaching by stepping: walks one small batch through the router, a dispatcher, the experts and
// back on in-process ranks, and prints every stage for every rank side by side, each row labelled with where it
// came from (token, source rank, expert). The buffers are the real dispatcher's (a StageObserver watches them);
// the stepped output is checked against the oracle. Exit status 1 when it disagrees with the oracle (or, with
// --expert-waves, when the waved run is not the unwaved one bit for bit).
//
// Default: seed 000's 4-token EP2 example. --preset tiny-v4 (with --world/--ep/--etp/--tokens) steps a preset layer.
#include "cli/choice_option.hpp"
#include "cli/cli_checks.hpp"
#include "cli/commands.hpp"
#include "cli/model_options.hpp"
#include "cli/report_output.hpp"
#include "cli/step/html_view.hpp"
#include "cli/step/json_view.hpp"
#include "cli/step/stepper.hpp"
#include "cli/step/text_view.hpp"
#include "cli/step/wave_walk.hpp"
#include "distributed/train/rank_groups.hpp"

#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>

namespace moe::cli {
namespace {

struct StepCommandOptions {
  dist::DispatcherKind dispatcher = dist::DispatcherKind::alltoall;
  ModelOptions model;   // none given: the seed example
  bool use_model = false;
  int world = 4, ep = 2, etp = 1, tokens = 3;
  int expert_waves = 1;  // > 1: the batch once more through wave-scheduled EP (AlltoAll)
  std::uint64_t seed = 7;
  std::string stage;
  std::optional<int> rank;
  bool interactive = false, json = false;
  std::string html;
};

// The stages --stage NAME selects: an exact id (dispatch.permute) or every stage of that name (permute).
std::vector<size_t> selected_stages(const step::Trace& t, const std::string& name) {
  std::vector<size_t> out;
  for (size_t i = 0; i < t.stages.size(); ++i)
    if (name.empty() || t.stages[i].id == name || t.stages[i].name == name) out.push_back(i);
  if (out.empty()) {
    std::string known;
    for (const auto& s : t.stages) known += (known.empty() ? "" : ", ") + s.id;
    throw std::invalid_argument("no stage '" + name + "' in the " + t.dispatcher + " walk (stages: " + known + ")");
  }
  return out;
}

// Enter advances, q (or the end of input) quits.
bool next_stage(std::istream& in, std::ostream& out) {
  out << "\n── Enter: next stage · q: quit ── " << std::flush;
  std::string line;
  if (!std::getline(in, line)) return false;
  return line.empty() || (line[0] != 'q' && line[0] != 'Q');
}

void run(const StepCommandOptions& o) {
  const dist::DispatcherKind kind = o.dispatcher;
  step::StepProblem problem;
  if (o.use_model) {
    const LayerPreset m = o.model.resolve();
    // The stepped layer on every rank: experts, their shards and gradients, and each stage's rows.
    const MoeConfig& c = m.config;
    MemoryEstimate e;
    e.parameters = 8.0 * c.num_experts * 3 * c.expert_width() * c.ffn_hidden * (o.world + 3);
    e.activations = 8.0 * o.tokens * o.world * (20.0 * c.hidden + 4.0 * c.num_experts + 6.0 * c.topk * c.ffn_hidden);
    // The provenance walk pushes one-hot tag rows through the same ~20 recorded stages (step/provenance.hpp): each of
    // the world·tokens·topk routed rows is TagLayout::width() = world·tokens·(1 + E) doubles wide, so this part grows
    // as world² (tiny-v4, 3 tokens a rank: measured 1.5 GB at 128 ranks and 6.0 GB at 256; this says 2.4 and 9.6).
    const double all_tokens = double(o.tokens) * o.world;
    e.activations += 8.0 * 20 * (all_tokens * c.topk) * (all_tokens * (1.0 + c.num_experts));
    // The ranks themselves, their stacks and groups (dist::inproc_world_bytes); the
    // layout is preset_example's (ProcessGroups refuses it as that would).
    ParallelLayout layout;
    layout.world = o.world;
    layout.ep = o.ep;
    layout.etp = o.etp;
    e.ranks = static_cast<double>(dist::inproc_world_bytes(ProcessGroups(layout)));
    require_fits(e, "stepping " + o.model.source(), "step a test-size model (tiny-v4, or --model with smaller "
                                                     "--hidden-size / --num-experts / --moe-ffn-hidden-size) on "
                                                     "fewer ranks (--world)");
    problem = step::preset_example(m, o.world, o.ep, o.etp, o.tokens, o.seed);
  } else {
    problem = step::seed_example(o.seed, kind);
  }
  if (o.rank && (*o.rank < 0 || *o.rank >= problem.layout.world))
    throw std::invalid_argument("--rank " + std::to_string(*o.rank) + " is not a rank of a world of " +
                                std::to_string(problem.layout.world));
  const step::Trace trace = step::run_step(problem, kind);
  const std::vector<size_t> stages = selected_stages(trace, o.stage);
  std::optional<step::WaveTrace> waves;
  if (o.expert_waves > 1) {
    if (kind != dist::DispatcherKind::alltoall)
      throw std::invalid_argument("--expert-waves runs with the AlltoAll dispatcher (it returns every (token, expert) "
                                  "row, so the waves keep the unwaved sums), not " + std::string(to_string(kind)));
    waves = step::run_waves(problem, o.expert_waves);
  }

  if (!o.html.empty()) {
    std::ostringstream page;
    step::write_html(trace, stages, o.rank, page);
    write_report_file("--html", o.html, page.str());
    if (!o.json) std::cout << "wrote " << o.html << " (" << stages.size() << " stages)\n";
  }
  if (o.json) {
    nlohmann::json j = step::trace_json(trace, stages, o.rank);
    if (waves) j["waves"] = step::waves_json(*waves);
    std::cout << j.dump(2) << "\n";
  } else if (o.html.empty() || !o.stage.empty() || o.interactive) {
    step::print_header(trace, std::cout);
    const step::TextOptions text{o.rank, 4};
    for (size_t i = 0; i < stages.size(); ++i) {
      step::print_stage(trace, stages[i], i + 1, stages.size(), text, std::cout);
      if (o.interactive && i + 1 < stages.size() && !next_stage(std::cin, std::cout)) {
        std::cout << "\n(stopped after " << i + 1 << " of " << stages.size() << " stages)\n";
        break;
      }
    }
    step::print_oracle(trace, std::cout);
    if (waves) step::print_waves(*waves, std::cout);
  }
  if (!trace.oracle.pass() || (waves && !waves->bitwise())) throw CLI::RuntimeError(1);
}

}  // namespace

void add_step_command(CLI::App& app) {
  auto o = std::make_shared<StepCommandOptions>();
  auto* cmd = app.add_subcommand(
      "step", "Walk a small batch through a dispatcher stage by stage on in-process ranks, every row labelled with "
              "its token, source rank and expert (default: seed 000's 4-token EP2 example)");
  add_choice(*cmd, "--dispatcher", o->dispatcher, "the token dispatcher to walk through");
  add_model_options(*cmd, o->model);  // a model (routed branch) instead of the seed example
  cmd->add_option("--world", o->world, "with a model: ranks")->capture_default_str();
  cmd->add_option("--ep,--expert-model-parallel-size", o->ep, "with a model: expert parallel size")->capture_default_str();
  cmd->add_option("--etp,--expert-tensor-parallel-size", o->etp, "with a model: expert tensor parallel size")
      ->capture_default_str();
  cmd->add_option("--tokens", o->tokens, "with a model: tokens per rank")->capture_default_str();
  cmd->add_option("--seed", o->seed, "seed of parameters and tokens")->capture_default_str()->check(seed_value());
  cmd->add_option("--expert-waves", o->expert_waves,
                  "then run the batch in N waves of experts (wave-scheduled EP, AlltoAll): which experts each wave "
                  "holds, the rows it moves, every rank's program and timeline, and the bitwise check against the "
                  "unwaved run")
      ->check(whole_at_least(1));
  cmd->add_option("--stage", o->stage, "print only this stage: an id (dispatch.permute) or a name (permute)");
  cmd->add_option("--rank", o->rank, "follow one rank");
  cmd->add_flag("--interactive", o->interactive, "advance stage by stage with Enter; q quits");
  cmd->add_flag("--json", o->json, "machine-readable output");
  cmd->add_option("--html", o->html, "write a self-contained page drawing the stages to this file");
  cmd->callback([o, cmd] {
    for (const auto& flag : model_option_names()) o->use_model = o->use_model || cmd->count(flag) > 0;
    for (const auto* flag : {"--world", "--ep", "--etp", "--tokens"})
      if (!o->use_model && cmd->count(flag) > 0)
        throw std::invalid_argument(std::string(flag) + " needs --preset or --model (the seed example's layout is "
                                                        "fixed: world 2, ep 2)");
    run(*o);
  });
}

}  // namespace moe::cli
