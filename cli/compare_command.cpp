// `moe-oracle compare DIR`: another framework's per-rank dump of one MoE layer's forward and backward (format
// moe-dump/1, compare/README.md) against the oracle; a step dump (moe-step/1) goes to compare_step.cpp. Exit 0 when every tensor present passes, 1 naming the first
// mismatching tensor, rank and index (and the Megatron deviation that would explain it, if one does), 2 when the
// dump is refused (malformed, inconsistent, or beyond the machine's memory).
#include "cli/choice_option.hpp"
#include "cli/commands.hpp"
#include "cli/compare_step.hpp"
#include "cli/model_options.hpp"
#include "cli/progress.hpp"
#include "cli/run_options.hpp"
#include "cli/text_format.hpp"
#include "compare/dump_compare.hpp"
#include "compare/dump_oracle.hpp"
#include "compare/step_dump.hpp"
#include "reference/tolerance_names.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <limits>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

namespace moe::cli {
namespace {

struct CompareOptions {
  std::string dir;
  std::string semantics;  // empty: the dump's claim
  std::optional<Precision> precision;  // unset: the arrays' (or dump.json's, when no looser)
  ExpertPath path = ExpertPath::expert_batched;
  bool explain = true;         // search for a deviation that explains a mismatch, when the search is cheap
  bool explain_always = false; // --explain: search whatever it costs
  bool json = false;
};

// The deviation search recompares the whole dump once per modelled deviation: done by default only while that
// costs less than this, so that a failing real-size layer reports at once.
constexpr double kExplainSecondsBudget = 60;

std::string sci(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2e", v);
  return buf;
}

std::string ranks_text(const compare::TensorResult& t) {
  if (t.ranks.size() == 1) return "rank " + std::to_string(t.ranks[0]);
  std::string s = t.summed ? "Σ ranks " : "ranks ";
  const bool contiguous = t.ranks.back() - t.ranks.front() + 1 == static_cast<int>(t.ranks.size());
  if (contiguous && t.ranks.size() > 2) return s + std::to_string(t.ranks.front()) + "-" + std::to_string(t.ranks.back());
  for (size_t i = 0; i < t.ranks.size(); ++i) s += (i ? "," : "") + std::to_string(t.ranks[i]);
  return s;
}

// What "pass" means for this dump, in one line.
std::string tolerance_text(const compare::Dump& dump, const compare::Comparison& c) {
  if (!c.error_model)
    return "|dump − oracle| ≤ " + sci(dump.tolerance->atol) + " + " + sci(dump.tolerance->rtol) +
           "·|oracle|; maps and counts exact";
  const bool bf16 = dump.precision == Precision::bfloat16;
  std::ostringstream s;
  s << "|dump − oracle| ≤ " << compare::kRoundingFactor << "·z(n)·(|d| + spread(d)) + 2u·|oracle| + u·rms(oracle), z(n) = "
    << "max(2, sqrt(2 ln n)) for a tensor of n elements, u = "
    << sci(compare::unit_roundoff(dump.precision)) << ", d = the oracle in float"
    << (bf16 ? " with bf16 storage" : "") << (dump.router_precision == Precision::bfloat16 ? " and bf16 logits" : "")
    << " − the oracle in double; and no tensor " << compare::kSigmas << " standard errors off scale beyond "
    << sci(compare::scale_floor(dump.precision, std::numeric_limits<std::int64_t>::max()))
    << " (more for a tensor of few rows: " << compare::kSigmas << "·u/sqrt(rows)); maps and counts exact";
  return s.str();
}

// "1.0000 (0.3σ)", or "" where no scale was fitted (maps, counts, scalars, tensors of few elements).
std::string scale_text(const compare::TensorResult& t) {
  if (t.exact || t.fit.blocks == 0) return "";
  char buf[48];
  if (std::isinf(t.fit.sigmas())) std::snprintf(buf, sizeof buf, "%.4f (exact)", t.fit.scale());
  else std::snprintf(buf, sizeof buf, "%.4f (%.1fσ)", t.fit.scale(), t.fit.sigmas());
  return buf;
}

nlohmann::json replay_json(const compare::SelectionReplay& r) {
  nlohmann::json beyond = nlohmann::json::array();
  for (const auto& f : r.beyond_rounding)
    beyond.push_back({{"rank", f.rank}, {"row", f.row}, {"margin", f.margin}, {"bound", f.bound}});
  return {{"possible", r.possible}, {"rows", r.rows}, {"replayed", r.replayed},
          {"largest_margin_replayed", r.largest_margin}, {"its_bound", r.its_bound}, {"beyond_rounding", beyond}};
}

void print_replay(const compare::SelectionReplay& r) {
  if (!r.possible) return;
  if (r.replayed > 0)
    std::cout << "\nrouting replayed: " << r.replayed << " of " << r.rows << " rows ("
              << sci(100.0 * static_cast<double>(r.replayed) / static_cast<double>(r.rows))
              << "%) selected other experts within the router's rounding; the oracle took the dump's selection there "
              << "(largest margin " << sci(r.largest_margin) << ", rounding allowed " << sci(r.its_bound) << ")\n";
  if (!r.beyond_rounding.empty()) {
    const auto& f = r.beyond_rounding.front();
    std::cout << "\nrouting differs beyond the router's rounding in " << r.beyond_rounding.size()
              << " row(s): first on rank " << f.rank << ", row " << f.row << ": margin " << sci(f.margin)
              << " where rounding allows " << sci(f.bound) << "\n";
  }
}

void run(const CompareOptions& a) {
  if (compare::is_step_dump(a.dir)) {  // a whole training step (moe-step/1): compare_step.cpp
    if (!a.explain || a.explain_always)
      throw std::invalid_argument("--explain and --no-explain are for layer dumps; " + a.dir + " is a step dump");
    run_compare_step(a.dir, a.semantics, a.precision, a.json);
    return;
  }
  const compare::Dump dump = compare::read_dump(a.dir, {a.semantics, a.precision});
  Progress progress("compare", "experts", compare::compare_steps(dump), a.json);
  const auto start = std::chrono::steady_clock::now();
  const compare::Comparison c = compare::compare_dump(dump, a.path, [&progress] { progress.step(); });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const auto modelled = [](const DeviationInfo& d) { return d.kind == DeviationKind::modelled; };
  const int candidates =
      static_cast<int>(std::count_if(deviation_catalogue().begin(), deviation_catalogue().end(), modelled));
  const bool search = !c.pass() && a.explain && (a.explain_always || seconds * candidates <= kExplainSecondsBudget);
  const std::vector<std::string> explaining =
      search ? compare::explaining_deviations(dump, a.path) : std::vector<std::string>();
  std::string not_searched;
  if (!c.pass() && a.explain && !search) {
    std::ostringstream s;
    s << std::fixed << std::setprecision(0) << "the search for a deviation that explains the mismatch was skipped: it "
      << "compares the dump once more under each of " << candidates << " modelled deviations, about "
      << seconds * candidates << " s here; --explain runs it";
    not_searched = s.str();
  }
  const compare::TensorResult* fail = c.first_failure();

  if (a.json) {
    nlohmann::json out{{"moe_oracle", MOE_ORACLE_VERSION},
                       {"dump", a.dir},
                       {"producer", dump.producer},
                       {"semantics", dump.config.semantics.spec()},
                       {"layout", layout_json(dump.layout)},
                       {"precision", to_string(dump.precision)},
                       {"precision_from", dump.precision_from},
                       {"oracle_path", std::string(to_string(a.path))},
                       {"compared", {{"forward_tensors", c.forward_tensors()}, {"backward_tensors", c.backward_tensors()},
                                     {"ranks", dump.layout.world}, {"backward", c.backward}}},
                       {"tolerance", c.error_model ? nlohmann::json(tolerance_text(dump, c))
                                                   : nlohmann::json{{"atol", dump.tolerance->atol},
                                                                    {"rtol", dump.tolerance->rtol}}},
                       {"pass", c.pass()},
                       {"absent", c.absent},
                       {"ignored", c.ignored},
                       {"explained_by", explaining},
                       {"explanation_searched", search}};
    out["error_model"] = c.error_model;
    if (c.replay_differences >= 0) out["replayed_capacity_slots_differing"] = c.replay_differences;
    out["routing_replay"] = replay_json(c.replay);
    if (dump.aux_pool) out["aux_pool_tokens"] = dump.aux_pool->tokens;
    for (const auto& t : c.tensors) {
      nlohmann::json row{{"tensor", t.tensor}, {"where", ranks_text(t)}, {"elements", t.elements},
                         {"max_abs", t.max_abs}, {"max_ratio", t.exact ? nlohmann::json(nullptr) : nlohmann::json(t.max_ratio)},
                         {"exact", t.exact}, {"backward", t.backward}, {"pass", t.pass()}};
      if (t.rows_differing > 0) row["rows_differing"] = t.rows_differing;
      if (t.fit.blocks > 0)
        row["scale"] = {{"rank", t.fit_rank}, {"value", t.fit.scale()}, {"sigma", t.fit.sigma}, {"floor", t.fit.floor},
                        {"sigmas", std::isinf(t.fit.sigmas()) ? nlohmann::json("inf") : nlohmann::json(t.fit.sigmas())},
                        {"systematic", t.systematic}};
      out["tensors"].push_back(row);
    }
    if (fail && fail->first)
      out["first_mismatch"] = {{"tensor", fail->tensor}, {"rank", fail->first->rank}, {"index", fail->first->index},
                               {"dump", fail->first->got}, {"oracle", fail->first->want}};
    else if (fail)
      out["systematic_error"] = {{"tensor", fail->tensor}, {"rank", fail->fit_rank}, {"scale", fail->fit.scale()},
                                 {"sigma", fail->fit.sigma}};
    std::cout << out.dump(2) << "\n";
  } else {
    std::cout << "moe-oracle compare " << a.dir << ": " << dump.producer << "\n"
              << "layout " << layout_name(dump.layout) << ", S " << dump.seq << " × B " << dump.batch
              << " per replica, dispatcher " << dump.dispatcher << ", semantics " << dump.config.semantics.spec()
              << ", precision " << to_string(dump.precision) << " (from " << dump.precision_from << "), router "
              << to_string(dump.router_precision) << "\n";
    if (dump.aux_pool)
      std::cout << "global_aux statistics pooled with " << std::fixed << std::setprecision(0) << dump.aux_pool->tokens
                << std::defaultfloat << " rows outside the dump (aux_pool)\n";
    std::cout << "pass: " << tolerance_text(dump, c) << "\n\n";
    TextTable table({"tensor", "where", "elements", "max |dump − oracle|", "of tolerance", "scale", "result"});
    for (const auto& t : c.tensors)
      table.add_row({t.tensor, ranks_text(t), std::to_string(t.elements), sci(t.max_abs),
                     t.exact ? (t.pass() ? "exact" : "differs") : sci(t.max_ratio), scale_text(t),
                     t.pass() ? "PASS" : "FAIL"});
    table.print(std::cout);
    if (!c.absent.empty()) {
      std::cout << "\nnot in the dump (not compared):";
      for (const auto& name : c.absent) std::cout << "\n  " << name;
      std::cout << "\n";
    }
    if (!c.ignored.empty()) {
      std::cout << "\nin the dump, neither read nor compared (names the format does not have):";
      for (const auto& name : c.ignored) std::cout << " " << name;
      std::cout << "\n";
    }
    print_replay(c.replay);
    if (c.replay_differences >= 0)
      std::cout << "\ncapacity decisions replayed from router.routing_map: " << c.replay_differences
                << " slot(s) differ from the oracle's own rule (position-drop-tie-order, pad-filler-tie-order)\n";
    if (fail && fail->first)
      std::cout << std::setprecision(17) << "\nFAIL: first mismatch in " << fail->tensor << " on rank "
                << fail->first->rank << " at flat index " << fail->first->index << ": dump " << fail->first->got
                << ", oracle " << fail->first->want << "\n";
    else if (fail)
      std::cout << "\nFAIL: " << fail->tensor << " on rank " << fail->fit_rank << " is "
                << compare::describe_scale(fail->fit) << ": a systematic error, though every element is within its "
                << "allowance\n";
    if (!not_searched.empty()) std::cout << not_searched << "\n";
    for (const auto& spec : explaining) {
      const std::string name = spec.substr(1);
      std::cout << "explained by " << name << ": the dump matches the oracle under " << dump.config.semantics.spec()
                << "," << spec << "\n  megatron: " << deviation_info(parse_deviation(name)).statement << "\n";
    }
    std::cout << "\n" << (c.pass() ? "PASS" : "FAIL") << ": " << c.tensors.size() << " tensors compared on "
              << dump.layout.world << " rank(s), " << c.forward_tensors() << " of the forward and "
              << c.backward_tensors() << " of the backward"
              << (c.backward ? "" : " (a forward-only dump: it has no output.grad, so no gradient was compared)")
              << "\n";
  }
  if (!c.pass()) throw CLI::RuntimeError(1);
}

}  // namespace

void add_compare_command(CLI::App& app) {
  auto args = std::make_shared<CompareOptions>();
  auto* cmd = app.add_subcommand(
      "compare",
      "Compare another framework's per-rank dump of one MoE layer (format moe-dump/1, e.g. from megatron_bridge/) "
      "with the oracle: every tensor present, per rank, with the dump's precision's tolerance; or of one training "
      "step (moe-step/1): every rank's reduced gradients against the oracle's global step");
  cmd->add_option("dir", args->dir, "the dump folder (dump.json or step.json, rank0/, rank1/, …)")->required();
  cmd->add_option("--semantics", args->semantics,
                  "compare under this semantics instead of the dump's claim (P,+deviation,-deviation)");
  add_choice(*cmd, "--precision", args->precision,
             "the arithmetic the framework computed in, which sets the tolerance (default: the arrays' dtype, or "
             "dump.json's precision when it is no looser; a dump cannot loosen its own tolerance)");
  add_oracle_path_option(*cmd, args->path);
  auto* no_explain =
      cmd->add_flag("!--no-explain", args->explain, "on a mismatch, do not search for a deviation that explains it");
  cmd->add_flag("--explain", args->explain_always,
                "on a mismatch, search for a deviation that explains it even when that takes long (by default the "
                "search runs when it costs under a minute: one more comparison per modelled deviation)")
      ->excludes(no_explain);
  cmd->add_flag("--json", args->json, "machine-readable output");
  cmd->callback([args] {
    try {
      run(*args);
    } catch (const compare::DumpError& e) {
      throw std::invalid_argument(std::string("dump refused: ") + e.what());
    }
  });
}

}  // namespace moe::cli
