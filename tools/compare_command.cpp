// `moe-oracle compare DIR`: another framework's per-rank dump of one MoE layer's forward and backward (format
// moe-dump/1, compare/README.md) against the oracle. Exit 0 when every tensor present passes, 1 naming the first
// mismatching tensor, rank and index (and the Megatron deviation that would explain it, if one does), 2 when the
// dump is refused (malformed, inconsistent, or beyond the machine's memory).
#include "compare/dump_compare.hpp"
#include "compare/dump_oracle.hpp"
#include "tools/commands.hpp"
#include "tools/layout_options.hpp"
#include "tools/model_options.hpp"
#include "tools/progress.hpp"
#include "tools/run_options.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>

namespace moe::cli {
namespace {

struct CompareOptions {
  std::string dir;
  std::string semantics;  // empty: the dump's claim
  std::string precision;  // empty: the arrays' (or dump.json's, when no looser)
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

void run(const CompareOptions& a) {
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
                       {"precision", dump.precision},
                       {"precision_from", dump.precision_from},
                       {"oracle_path", std::string(to_string(a.path))},
                       {"compared", {{"forward_tensors", c.forward_tensors()}, {"backward_tensors", c.backward_tensors()},
                                     {"ranks", dump.layout.world}, {"backward", c.backward}}},
                       {"tolerance", {{"atol", dump.tolerance.atol}, {"rtol", dump.tolerance.rtol}}},
                       {"pass", c.pass()},
                       {"absent", c.absent},
                       {"ignored", c.ignored},
                       {"explained_by", explaining},
                       {"explanation_searched", search}};
    if (c.replay_differences >= 0) out["replayed_capacity_slots_differing"] = c.replay_differences;
    for (const auto& t : c.tensors)
      out["tensors"].push_back({{"tensor", t.tensor}, {"where", ranks_text(t)}, {"elements", t.elements},
                                {"max_abs", t.max_abs}, {"max_ratio", t.exact ? nlohmann::json(nullptr) : nlohmann::json(t.max_ratio)},
                                {"exact", t.exact}, {"backward", t.backward}, {"pass", t.pass()}});
    for (size_t k = 0; k < c.tensors.size(); ++k)
      if (c.tensors[k].rows_differing > 0) {
        out["tensors"][k]["rows_differing"] = c.tensors[k].rows_differing;
        out["tensors"][k]["rows_differing_at_near_tie"] = c.tensors[k].rows_differing_at_near_tie;
      }
    if (fail)
      out["first_mismatch"] = {{"tensor", fail->tensor}, {"rank", fail->first->rank}, {"index", fail->first->index},
                               {"dump", fail->first->got}, {"oracle", fail->first->want}};
    std::cout << out.dump(2) << "\n";
  } else {
    std::cout << "moe-oracle compare " << a.dir << ": " << dump.producer << "\n"
              << "layout " << layout_name(dump.layout) << ", S " << dump.seq << " × B " << dump.batch
              << " per replica, dispatcher " << dump.dispatcher << ", semantics " << dump.config.semantics.spec()
              << ", precision " << dump.precision << " (from " << dump.precision_from << "; pass: |dump − oracle| ≤ " << sci(dump.tolerance.atol)
              << " + " << sci(dump.tolerance.rtol) << "·|oracle|; maps and counts exact)\n\n";
    TextTable table({"tensor", "where", "elements", "max |dump − oracle|", "of tolerance", "result"});
    for (const auto& t : c.tensors)
      table.add_row({t.tensor, ranks_text(t), std::to_string(t.elements), sci(t.max_abs),
                     t.exact ? (t.pass() ? "exact" : "differs") : sci(t.max_ratio), t.pass() ? "PASS" : "FAIL"});
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
    for (const auto& t : c.tensors)
      if (t.rows_differing > 0)
        std::cout << "\n" << t.tensor << " differs in " << t.rows_differing << " row(s); "
                  << t.rows_differing_at_near_tie << " of them are near ties in the oracle's ranking at the dump's "
                  << "precision (the k-th and (k+1)-th scores within its tolerance), where a lower-precision router "
                  << "may pick either expert (compare/README.md, \"When it fails\")\n";
    if (c.replay_differences >= 0)
      std::cout << "\ncapacity decisions replayed from router.routing_map: " << c.replay_differences
                << " slot(s) differ from the oracle's own rule (position-drop-tie-order, pad-filler-tie-order)\n";
    if (fail)
      std::cout << std::setprecision(17) << "\nFAIL: first mismatch in " << fail->tensor << " on rank "
                << fail->first->rank << " at flat index " << fail->first->index << ": dump " << fail->first->got
                << ", oracle " << fail->first->want << "\n";
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
      "with the oracle: every tensor present, per rank, with the dump's precision's tolerance");
  cmd->add_option("dir", args->dir, "the dump folder (dump.json, rank0/, rank1/, …)")->required();
  cmd->add_option("--semantics", args->semantics,
                  "compare under this semantics instead of the dump's claim (P,+deviation,-deviation)");
  cmd->add_option("--precision", args->precision,
                  "the arithmetic the framework computed in, which sets the tolerance (default: the arrays' dtype, or "
                  "dump.json's precision when it is no looser; a dump cannot loosen its own tolerance)")
      ->check(CLI::IsMember({"float64", "float32", "bfloat16"}));
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
