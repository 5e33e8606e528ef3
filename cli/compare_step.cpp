#include "cli/compare_step.hpp"

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

void run_compare_step(const std::string& dir, const std::string& semantics, std::optional<Precision> precision,
                      bool json) {
  const compare::StepReadOptions options{semantics, precision};
  const compare::StepDump d = compare::read_step_dump(dir, options);
  const compare::StepComparison c = compare::compare_step_dump(d);
  const compare::StepTensorResult* fail = c.first_failure();
  // What was compared, and what the dump left out (never judged, always said).
  std::string compared = d.grad_ranges.empty()
                             ? "the reduced gradient of every parameter on every rank that holds it"
                             : "every element of every reduced gradient on the rank whose distributed optimizer "
                               "steps it (its grad_ranges, tiling each shard)";
  std::vector<std::string> left_out;
  if (c.lm_loss) compared += ", the lm loss reported";
  else left_out.push_back("the loss (the dump reports none)");
  if (c.grad_norm) compared += ", the grad norm every rank reported";
  else left_out.push_back("the grad norm (the dump reports none)");
  if (d.optimizer) compared += ", every parameter (and expert bias) after Adam's step on every rank that holds it";
  else left_out.push_back("the parameters after the step (the dump holds no optimizer)");
  if (d.optimizer && d.optimizer->state) compared += ", Adam's two moments of every gradient a rank holds";
  else if (d.optimizer) left_out.push_back("the optimizer's state (the dump holds none: optimizer.state)");
  std::string not_compared;
  for (const auto& what : left_out) not_compared += (not_compared.empty() ? "" : "; ") + what;
  if (not_compared.empty()) not_compared = "nothing the format holds";
  const auto rows = [](const std::vector<compare::StepTensorResult>& list) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& t : list)
      out.push_back({{"parameter", t.stem}, {"class", compare::to_string(t.cls)}, {"ranks", t.ranks},
                     {"elements", t.elements}, {"max_abs", t.max_abs}, {"of_tolerance", t.worst},
                     {"scale", t.scale}, {"pass", t.pass()}});
    return out;
  };
  if (json) {
    const nlohmann::json tensors = rows(c.tensors);
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
    if (c.grad_norm)
      out["grad_norm"] = {{"oracle", c.grad_norm->want}, {"allowance", c.grad_norm->allowance},
                          {"reported", c.grad_norm->got}, {"worst_rank", c.grad_norm->worst_rank},
                          {"of_tolerance", c.grad_norm->worst}, {"pass", c.grad_norm->pass()}};
    if (d.optimizer) out["after_step"] = rows(c.after);
    if (d.optimizer && d.optimizer->state) out["optimizer_state"] = rows(c.state);
    if (c.lm_loss)
      out["lm_loss"] = {{"oracle", c.lm_loss->want}, {"allowance", c.lm_loss->allowance},
                        {"reported", c.lm_loss->got.at(0)}, {"of_tolerance", c.lm_loss->worst},
                        {"pass", c.lm_loss->pass()}};
    if (const auto* w = c.worst_failure())
      out["worst_mismatch"] = {{"parameter", w->stem}, {"class", compare::to_string(w->cls)},
                               {"of_tolerance", w->worst}, {"scale", w->scale}};
    std::cout << out.dump(2) << "\n";
  } else {
    const ParallelLayout& l = d.layout;
    std::cout << "moe-oracle compare " << dir << ": a training step, " << d.producer << "\n"
              << "layout w" << l.world << " tp" << l.tp << " cp" << l.cp << " ep" << l.ep << " etp" << l.etp << " dp"
              << l.dp()
              << ", batch " << d.global_batch << " × seq "
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
    if (c.grad_norm) {
      const compare::ReportedResult& n = *c.grad_norm;
      std::cout << std::setprecision(9) << "\ngrad norm: the oracle's " << n.want << " (allowance " << sci(n.allowance)
                << "); reported " << n.got[static_cast<size_t>(n.worst_rank)] << " on rank " << n.worst_rank
                << " (the furthest of " << n.got.size() << "), " << sci(n.worst) << " of the allowance: "
                << (n.pass() ? "PASS" : "FAIL") << "\n";
    }
    if (c.lm_loss)
      std::cout << std::setprecision(9) << "\nlm loss (CE per valid token of the global batch): the oracle's "
                << c.lm_loss->want << ", reported " << c.lm_loss->got.at(0) << ", " << sci(c.lm_loss->worst)
                << " of its tolerance: " << (c.lm_loss->pass() ? "PASS" : "FAIL") << "\n";
    if (d.optimizer) {
      const compare::StepOptimizer& o = *d.optimizer;
      std::cout << "\nafter Adam's step " << o.steps_before + 1
                << (o.steps_before > 0 ? " from the moments in inputs/" : " from zero moments") << " (lr " << o.adam.lr << ", betas " << o.adam.beta1 << " " << o.adam.beta2
                << ", eps " << o.adam.eps << ", weight decay " << o.adam.weight_decay;
      for (size_t i = 0; i < o.no_decay.size(); ++i)
        std::cout << (i == 0 ? " except " : ", ") << compare::to_string(o.no_decay[i]);
      std::cout << ", clip at " << o.clip_grad
                << "), each element within the update of a gradient within its tolerance:\n";
      std::printf("%-28s %-14s %-10s %9s %20s %13s  %s\n", "parameter after the step", "class", "ranks",
                  "elements", "max |dump − oracle|", "of tolerance", "result");
      const auto print_rows = [](const std::vector<compare::StepTensorResult>& list) {
        for (const auto& t : list)
          std::printf("%-28s %-14s %-10s %9lld %20s %13s  %s\n", t.stem.c_str(), compare::to_string(t.cls),
                      ranks_text(t.ranks).c_str(), static_cast<long long>(t.elements), sci(t.max_abs).c_str(),
                      sci(t.worst).c_str(), t.pass() ? "PASS" : "FAIL");
      };
      print_rows(c.after);
      if (o.state) {
        std::cout << "\nAdam's moments after the step, β1·m + (1 − β1)·ĝ and β2·v + (1 − β2)·ĝ² of the clipped "
                     "gradient ĝ, each within those of a gradient within its tolerance:\n";
        std::printf("%-28s %-14s %-10s %9s %20s %13s  %s\n", "moment", "class", "ranks", "elements",
                    "max |dump − oracle|", "of tolerance", "result");
        print_rows(c.state);
      }
    }
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
    std::cout << "\n" << (c.pass() ? "PASS" : "FAIL") << ": " << c.tensors.size() << " gradients"
              << (d.optimizer ? " and " + std::to_string(c.after.size()) + " parameters after the step" : "")
              << (!c.state.empty() ? ", " + std::to_string(c.state.size()) + " moments" : "")
              << (c.grad_norm ? ", the grad norm," : "") << (c.lm_loss ? " the lm loss," : "") << " compared on "
              << l.world << " rank(s): " << compared << "; not compared: " << not_compared << "\n";
  }
  if (!c.pass()) throw CLI::RuntimeError(1);
}

}  // namespace moe::cli
