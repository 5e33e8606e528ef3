// `moe-oracle explain`: why does the objective (or a gradient) change when the layout changes? Runs the global
// step oracle for two layouts under a semantics profile and attributes the difference to the profile's deviations,
// toggling one at a time:
//   Δ          = X(B) − X(A)                          under the profile
//   Δ_{−d}     = the same with deviation d off
//   share of d = ⟨Δ − Δ_{−d}, Δ⟩ / ⟨Δ, Δ⟩              (for the scalar objective: (Δ − Δ_{−d}) / Δ)
//   intended   = ⟨Δ_{none}, Δ⟩ / ⟨Δ, Δ⟩               every deviation off: the intended objective's own dependence
//   interaction = 1 − intended − Σ_d share of d        what no single deviation explains (deviations that interact)
// The profile's refused deviations (Megatron raising on an input) change no number and stay off throughout.
// Gradients are compared per class (dense, expert, router and norms), as vectors over every tensor of the class.
#include "cli/commands.hpp"
#include "cli/run_options.hpp"
#include "cli/text_format.hpp"
#include "reference/memory_estimate.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <memory>

namespace moe::cli {
namespace {

struct ExplainOptions {
  RunOptions run;
  std::vector<std::string> layouts;
  bool json = false;
};

// The objective and the gradient of each class, flattened in tensor order: what a difference is taken of.
constexpr int kClasses = 4;  // objective, dense, expert, router and norms
const char* const kClassNames[kClasses] = {"objective", "grad dense", "grad expert", "grad router+norms"};

int class_of(const std::string& tensor) {
  if (tensor.find("expert_fc") != std::string::npos) return 2;
  if (tensor.find("router_weight") != std::string::npos || tensor.find("norm") != std::string::npos ||
      tensor.find("shared_gate") != std::string::npos)
    return 3;  // sequence-parallel parameters: replicated over TP, each TP rank seeing other tokens
  return 1;
}

using Point = std::array<std::vector<double>, kClasses>;

struct Run {
  GlobalStep step;
  Point point;
};

Run run_oracle(const ModelConfig& model, const ModelParams<double>& params, const GlobalBatch& batch,
               const ParallelLayout& layout, const RunOptions& o) {
  Run r{global_step(model, params, batch, layout, o.micro_batch, o.mode()), {}};
  r.point[0] = {r.step.objective};
  for (const auto& t : trained_tensors(model, r.step.grads))
    r.point[static_cast<size_t>(class_of(t.name))].insert(r.point[static_cast<size_t>(class_of(t.name))].end(),
                                                           t.data, t.data + t.size);
  return r;
}

std::vector<double> difference(const std::vector<double>& b, const std::vector<double>& a) {
  std::vector<double> d(a.size());
  for (size_t i = 0; i < a.size(); ++i) d[i] = b[i] - a[i];
  return d;
}

double dot(const std::vector<double>& x, const std::vector<double>& y) {
  double s = 0;
  for (size_t i = 0; i < x.size(); ++i) s += x[i] * y[i];
  return s;
}

struct Attribution {
  double size = 0;                 // |Δ| (objective: signed Δ)
  double intended = 0;             // share of the intended objective's own layout dependence
  std::vector<double> deviations;  // share of each toggled deviation
  double interaction = 0;
};

std::string percent(double share) {
  if (std::abs(share) < 0.0005) share = 0;  // no "-0.0%"
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100 * share);
  return buf;
}

std::string sci(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3e", v);
  return buf;
}

void run(const ExplainOptions& a) {
  if (a.layouts.size() != 2) throw std::invalid_argument("--layout: give exactly two layouts, A then B");
  const RunOptions& o = a.run;
  const ParallelLayout la = parse_layout(a.layouts[0], "--layout"), lb = parse_layout(a.layouts[1], "--layout");
  const ModelConfig model = o.model();
  // A full-size model (--model of a published config) would take all memory before std::bad_alloc: the one
  // estimate decides first. A step's working set, plus the two full runs' gradients kept for the attribution.
  const std::uint64_t step = global_step_bytes(model, o.seq, o.global_batch),
                      kept = std::min(model_param_bytes(model), UINT64_MAX / 4) * 2;
  require_memory(step > UINT64_MAX - kept ? UINT64_MAX : step + kept, "explain: " + o.source.source());
  const auto params = random_model_params<double>(model, o.seed);
  const GlobalBatch batch = o.batch(model, o.seed + 1);

  // The deviations that change the oracle's numbers and are on under this loss mode. A refused one changes no
  // number (it only refuses inputs Megatron raises on); it is off in the counterfactuals, where turning another
  // deviation off could make it refuse.
  Semantics semantics = model.semantics().in_mode(o.mode());
  std::vector<Deviation> toggled;
  for (Deviation d : semantics.deviations()) {
    if (deviation_info(d).kind == DeviationKind::modelled) toggled.push_back(d);
    if (deviation_info(d).kind == DeviationKind::refused) semantics = semantics.with(d, false);
  }
  const auto with = [&](const Semantics& s) {
    ModelConfig m = model;
    m.layer.semantics = s;
    return m;
  };
  Semantics none = semantics;
  for (Deviation d : toggled) none = none.with(d, false);

  const Run a_full = run_oracle(model, params, batch, la, o), b_full = run_oracle(model, params, batch, lb, o);
  std::array<Attribution, kClasses> attributions;
  std::array<std::vector<double>, kClasses> delta;
  for (int c = 0; c < kClasses; ++c) delta[c] = difference(b_full.point[c], a_full.point[c]);
  const auto share_of = [&](const Point& pa, const Point& pb, int c) {
    const double norm = dot(delta[c], delta[c]);
    return norm > 0 ? dot(difference(pb[c], pa[c]), delta[c]) / norm : 0.0;
  };
  {
    const Run an = run_oracle(with(none), params, batch, la, o), bn = run_oracle(with(none), params, batch, lb, o);
    for (int c = 0; c < kClasses; ++c) {
      attributions[c].size = c == 0 ? delta[0][0] : std::sqrt(dot(delta[c], delta[c]));
      attributions[c].intended = share_of(an.point, bn.point, c);
    }
  }
  for (Deviation d : toggled) {
    const ModelConfig without = with(semantics.with(d, false));
    const Run ad = run_oracle(without, params, batch, la, o), bd = run_oracle(without, params, batch, lb, o);
    for (int c = 0; c < kClasses; ++c) attributions[c].deviations.push_back(1.0 - share_of(ad.point, bd.point, c));
  }
  for (auto& at : attributions) {
    at.interaction = 1.0 - at.intended;
    for (double s : at.deviations) at.interaction -= s;
    if (at.size == 0) at.interaction = 0;
  }

  // The headline: the objective's difference and where it comes from.
  std::string headline;
  {
    const Attribution& j = attributions[0];
    char buf[96];
    std::snprintf(buf, sizeof buf, "loss differs by %.3g", std::abs(j.size));
    headline = buf;
    if (j.size == 0) {
      headline = "the loss is the same for both layouts";
    } else {
      std::string parts;
      const auto add = [&](double share, const std::string& name) {
        if (std::abs(share) < 0.0005) return;
        parts += (parts.empty() ? ": " : ", ") + percent(share) + " from " + name;
      };
      for (size_t i = 0; i < toggled.size(); ++i) add(j.deviations[i], std::string(deviation_info(toggled[i]).name));
      add(j.intended, "the intended objective itself");
      headline += parts;
      if (std::abs(j.interaction) >= 0.0005) headline += "; " + percent(j.interaction) + " from interactions";
    }
  }

  if (a.json) {
    nlohmann::json out{{"moe_oracle", MOE_ORACLE_VERSION},
                       {"semantics", model.semantics().spec()},
                       {"scaling", to_string(o.scaling)},
                       {"layouts", {layout_json(la), layout_json(lb)}},
                       {"objective", {a_full.step.objective, b_full.step.objective}},
                       {"summary", headline}};
    for (int c = 0; c < kClasses; ++c) {
      nlohmann::json row{{"quantity", kClassNames[c]},
                         {"difference", attributions[c].size},
                         {"intended", attributions[c].intended},
                         {"interaction", attributions[c].interaction}};
      for (size_t i = 0; i < toggled.size(); ++i)
        row["deviations"][std::string(deviation_info(toggled[i]).name)] = attributions[c].deviations[i];
      out["attribution"].push_back(row);
    }
    for (const Run* r : {&a_full, &b_full}) {
      nlohmann::json w = nlohmann::json::array();
      for (Eigen::Index s = 0; s < r->step.ce_weights.rows(); ++s) {
        std::vector<double> row(static_cast<size_t>(r->step.ce_weights.cols()));
        for (Eigen::Index p = 0; p < r->step.ce_weights.cols(); ++p) row[static_cast<size_t>(p)] = r->step.ce_weights(s, p);
        w.push_back(row);
      }
      out["ce_weights"].push_back(w);
    }
    std::cout << out.dump(2) << "\n";
    return;
  }

  std::cout << "moe-oracle explain: " << o.describe() << "\n"
            << "A: " << describe(la) << "\n   J = " << sci(a_full.step.objective) << "\n"
            << "B: " << describe(lb) << "\n   J = " << sci(b_full.step.objective) << "\n\n";
  std::vector<std::string> header{"quantity", "B − A"};
  for (Deviation d : toggled) header.emplace_back(deviation_info(d).name);
  header.emplace_back("intended");
  header.emplace_back("interaction");
  TextTable table(header);
  for (int c = 0; c < kClasses; ++c) {
    const Attribution& at = attributions[c];
    std::vector<std::string> row{kClassNames[c], c == 0 ? sci(at.size) : "|" + sci(at.size) + "|"};
    for (double s : at.deviations) row.push_back(at.size == 0 ? "-" : percent(s));
    row.push_back(at.size == 0 ? "-" : percent(at.intended));
    row.push_back(at.size == 0 ? "-" : percent(at.interaction));
    table.add_row(row);
  }
  table.print(std::cout);
  std::cout << "\n" << headline << "\n";
  std::cout << "(shares: what turning one deviation off removes of the difference; 'intended': what remains with "
               "every deviation off)\n";
  if (batch.size * batch.seq <= 64) {
    std::cout << "\nweight of each token's CE in J (sequence: positions), A | B:\n";
    for (int s = 0; s < batch.size; ++s) {
      std::cout << "  seq " << s << ":";
      for (const Run* r : {&a_full, &b_full}) {
        for (int p = 0; p < batch.seq; ++p) std::cout << " " << trimmed(r->step.ce_weights(s, p), 4);
        if (r == &a_full) std::cout << "  |";
      }
      std::cout << "\n";
    }
  }
}

}  // namespace

void add_explain_command(CLI::App& app) {
  auto args = std::make_shared<ExplainOptions>();
  auto* cmd = app.add_subcommand(
      "explain",
      "Run the oracle for two layouts under a semantics profile and attribute the difference in the objective and "
      "each gradient class to the profile's deviations (e.g. --layout cp=1 --layout cp=2 --padding 1)");
  add_run_options(*cmd, args->run);
  cmd->add_option("--layout", args->layouts, "a layout, e.g. cp=2 or world=4,ep=2 (give two: A then B)")
      ->required()
      ->expected(2);
  cmd->add_flag("--json", args->json, "machine-readable output (with the per-token CE weights of both layouts)");
  cmd->callback([args] { run(*args); });
}

}  // namespace moe::cli
