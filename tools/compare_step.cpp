#include "tools/compare_step.hpp"

#include "compare/step_dump.hpp"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <iomanip>
#include <iostream>

namespace moe::cli {
namespace {

std::string sci(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2e", v);
  return buf;
}

std::string ranks_text(const std::vector<int>& ranks) {
  if (ranks.size() == 1) return "rank " + std::to_string(ranks[0]);
  const bool contiguous = ranks.back() - ranks.front() + 1 == static_cast<int>(ranks.size());
  if (contiguous && ranks.size() > 2) return "ranks " + std::to_string(ranks.front()) + "-" + std::to_string(ranks.back());
  std::string s = "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? "," : "") + std::to_string(ranks[i]);
  return s;
}

std::string factor(double scale) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f×", scale);
  return buf;
}

}  // namespace

void run_compare_step(const std::string& dir, const std::string& semantics, const std::string& precision, bool json) {
  compare::StepReadOptions options{semantics, std::nullopt};
  if (!precision.empty()) options.precision = parse_precision(precision);
  const compare::StepDump d = compare::read_step_dump(dir, options);
  const compare::StepComparison c = compare::compare_step_dump(d);
  const compare::StepTensorResult* fail = c.first_failure();
  const std::string compared = "the reduced gradient of every parameter on every rank that holds it";
  const std::string not_compared = "the loss, the grad norm and the parameters after the optimizer's step (not in "
                                   "moe-step/1 yet)";
  if (json) {
    nlohmann::json tensors = nlohmann::json::array();
    for (const auto& t : c.tensors)
      tensors.push_back({{"parameter", t.stem}, {"class", compare::to_string(t.cls)}, {"ranks", t.ranks},
                         {"elements", t.elements}, {"max_abs", t.max_abs}, {"of_tolerance", t.worst},
                         {"scale", t.scale}, {"pass", t.pass()}});
    nlohmann::json scales = nlohmann::json::array();
    for (const auto& s : c.scales)
      scales.push_back({{"class", compare::to_string(s.cls)}, {"scale", s.scale}, {"ranks", s.ranks},
                        {"tensors", s.tensors}});
    nlohmann::json out{{"moe_oracle", MOE_ORACLE_VERSION}, {"dump", dir}, {"format", compare::kStepDumpFormat},
                       {"producer", d.producer}, {"semantics", d.model.semantics().spec()},
                       {"precision", std::string(to_string(d.precision))},
                       {"tolerance", {{"atol", c.tolerance.atol}, {"rtol", c.tolerance.rtol}}},
                       {"objective", c.objective}, {"compared", compared}, {"not_compared", not_compared},
                       {"tensors", tensors}, {"scale_findings", scales}, {"pass", c.pass()}};
    if (const auto* w = c.worst_failure())
      out["worst_mismatch"] = {{"parameter", w->stem}, {"class", compare::to_string(w->cls)},
                               {"of_tolerance", w->worst}, {"scale", w->scale}};
    std::cout << out.dump(2) << "\n";
  } else {
    const ParallelLayout& l = d.layout;
    std::cout << "moe-oracle compare " << dir << ": a training step, " << d.producer << "\n"
              << "layout w" << l.world << " ep" << l.ep << " dp" << l.dp() << ", batch " << d.global_batch << " × seq "
              << d.seq << " in microbatches of " << d.micro_batch << ", loss mode " << to_string(d.loss_mode)
              << ", semantics " << d.model.semantics().spec() << ", precision " << to_string(d.precision)
              << (d.precision_stated ? " (--precision)" : " (the files')") << "\n"
              << "pass: |dump − oracle| ≤ " << sci(c.tolerance.atol) << " + " << sci(c.tolerance.rtol)
              << "·|oracle| against the oracle's global step (objective J = " << c.objective << ")\n\n";
    std::printf("%-28s %-14s %-10s %9s %20s %13s %8s  %s\n", "gradient", "class", "ranks", "elements",
                "max |dump − oracle|", "of tolerance", "scale", "result");
    for (const auto& t : c.tensors)
      std::printf("%-28s %-14s %-10s %9lld %20s %13s %8.4f  %s\n", t.stem.c_str(), compare::to_string(t.cls),
                  ranks_text(t.ranks).c_str(), static_cast<long long>(t.elements), sci(t.max_abs).c_str(),
                  sci(t.worst).c_str(), t.scale, t.pass() ? "PASS" : "FAIL");
    std::fflush(stdout);
    for (const auto& s : c.scales)
      std::cout << "\n" << compare::to_string(s.cls) << " gradients are " << factor(s.scale) << " the oracle's on "
                << ranks_text(s.ranks) << " (" << s.tensors << " tensor" << (s.tensors == 1 ? "" : "s")
                << ", each that factor off within 0.1%)";
    if (!c.scales.empty()) std::cout << "\n";
    if (const auto* w = c.worst_failure())
      std::cout << "\nlargest mismatch: " << compare::to_string(w->cls) << " (" << w->stem << ", " << sci(w->worst)
                << " of its tolerance, scale " << std::setprecision(5) << w->scale << ")\n";
    if (fail)
      std::cout << std::setprecision(17) << "\nFAIL: first mismatch in " << fail->stem << " on rank "
                << fail->first_rank << " at flat index " << fail->first_index << ": dump " << fail->got << ", oracle "
                << fail->want << "\n";
    std::cout << "\n" << (c.pass() ? "PASS" : "FAIL") << ": " << c.tensors.size() << " gradients compared on "
              << l.world << " rank(s): " << compared << "; not compared: " << not_compared << "\n";
  }
  if (!c.pass()) throw CLI::RuntimeError(1);
}

}  // namespace moe::cli
