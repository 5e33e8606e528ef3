#include "compare/dump_compare.hpp"

#include "compare/dump_names.hpp"
#include "compare/dump_tensors.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>

namespace moe::compare {
namespace {

// A float64 dump is judged by the table's row (reassociation only); a float32 or bf16 one by the rounding oracle's
// error model (error_model.hpp).
bool modelled(const Dump& dump) { return dump.precision != Precision::float64; }

}  // namespace

bool Comparison::pass() const {
  for (const auto& t : tensors)
    if (!t.pass()) return false;
  return true;
}

int Comparison::forward_tensors() const {
  return static_cast<int>(std::count_if(tensors.begin(), tensors.end(), [](const TensorResult& t) { return !t.backward; }));
}

int Comparison::backward_tensors() const { return static_cast<int>(tensors.size()) - forward_tensors(); }

const TensorResult* Comparison::first_failure() const {
  for (const auto& t : tensors)
    if (!t.pass()) return &t;
  return nullptr;
}

int compare_steps(const Dump& dump) { return oracle_steps(dump); }

Comparison compare_dump(const Dump& dump, ExpertPath path, const std::function<void()>& progress) {
  const bool model = modelled(dump);
  const Tolerance tol = model ? Tolerance{} : *dump.tolerance;  // unused under the error model
  const Precision precision = dump.precision;
  Comparison out;
  out.backward = has_backward(dump);
  out.error_model = model;
  std::map<std::string, size_t> index;  // tensor name -> position in out.tensors
  std::map<std::string, std::vector<int>> absent;

  // Each expected tensor is compared as it arrives and then dropped (the oracle streams the experts).
  const auto judge = [&](const Expected& e, const Expected* rounded) {
    if (model && (rounded == nullptr || rounded->tensor != e.tensor || rounded->values.size() != e.values.size()))
      throw DumpError(dump.dir.string() + ": the rounding oracle expects other tensors than the double one");
    const std::vector<double> allowance =
        model && !e.exact ? element_allowance(e.values, rounded->values, precision, e.shape, e.rows)
                          : std::vector<double>{};
    const std::vector<int> ranks = e.summed_ranks.empty() ? std::vector<int>{e.rank} : e.summed_ranks;
    bool present = true;
    for (int r : ranks) present = present && dump.ranks[static_cast<size_t>(r)].has(e.tensor);
    if (!present) {
      absent[e.tensor].push_back(e.rank);
      return;
    }
    std::vector<double> got = dump.ranks[static_cast<size_t>(ranks[0])].values(e.tensor, e.shape);
    for (size_t k = 1; k < ranks.size(); ++k) {
      const std::vector<double> v = dump.ranks[static_cast<size_t>(ranks[k])].values(e.tensor, e.shape);
      for (size_t i = 0; i < v.size(); ++i) got[i] += v[i];
    }
    if (!index.count(e.tensor)) {
      index[e.tensor] = out.tensors.size();
      TensorResult t;
      t.tensor = e.tensor;
      t.summed = e.summed_ranks.size() > 1;
      t.exact = e.exact;
      t.backward = e.backward;
      out.tensors.push_back(t);
    }
    TensorResult& t = out.tensors[index[e.tensor]];
    t.ranks.insert(t.ranks.end(), ranks.begin(), ranks.end());
    t.elements += static_cast<std::int64_t>(got.size());
    // The running maxima in locals: stores into `t` could alias the compared doubles and were redone per element.
    double max_abs = t.max_abs, max_ratio = t.max_ratio;
    std::int64_t first_bad = -1;
    const double inf = std::numeric_limits<double>::infinity();
    for (size_t i = 0; i < got.size(); ++i) {
      // A NaN or infinity in the dump fails whatever the tolerance (Tolerance::ratio gives +inf).
      const double err = std::isfinite(got[i]) ? std::abs(got[i] - e.values[i]) : inf;
      const double ratio = e.exact  ? (got[i] == e.values[i] ? 0.0 : inf)
                           : model  ? Tolerance{allowance[i], 0}.ratio(got[i], e.values[i])
                                    : tol.ratio(got[i], e.values[i]);
      max_abs = std::max(max_abs, err);
      max_ratio = std::max(max_ratio, ratio);
      if (ratio > 1.0 && first_bad < 0) first_bad = static_cast<std::int64_t>(i);
    }
    t.max_abs = max_abs;
    t.max_ratio = max_ratio;
    if (first_bad >= 0 && e.tensor == tensor::kRoutingMap) {
      const size_t cols = static_cast<size_t>(dump.config.num_experts);
      for (size_t row = 0; row * cols < got.size(); ++row) {
        bool differs = false;
        for (size_t c = row * cols; c < (row + 1) * cols && !differs; ++c) differs = got[c] != e.values[c];
        t.rows_differing += differs;
      }
    }
    if (!e.exact) {
      const ScaleFit fit = fit_scale(got, e.values, precision, e.rows);
      if (t.fit_rank < 0 || fit.sigmas() > t.fit.sigmas()) {
        t.fit = fit;
        t.fit_rank = e.rank;
      }
      t.systematic = t.systematic || fit.systematic();
    }
    // The first failing element in (rank, index) order, whatever order the ranks arrive in.
    if (first_bad >= 0 && (!t.first || e.rank < t.first->rank))
      t.first = Mismatch{e.rank, first_bad, got[static_cast<size_t>(first_bad)],
                         e.values[static_cast<size_t>(first_bad)]};
  };
  OracleRun run;
  try {
    run = run_oracle(dump, OracleOptions{path, model, progress}, judge);
  } catch (const std::invalid_argument& e) {  // the oracle's own validation of inputs and parameters
    throw DumpError(dump.dir.string() + ": the oracle refuses the dump's inputs: " + e.what());
  }
  out.replay_differences = run.replay_differences;
  out.replay = run.replay;
  // Reported in the order a reader follows the layer: the forward, the layer's input and router gradients, the
  // routed experts', the shared expert's (the oracle hands over the experts' first).
  const auto place = [](const TensorResult& t) {
    if (!t.backward) return 0;
    if (t.tensor.rfind("experts.", 0) == 0) return 2;
    return t.tensor.rfind("shared_experts.", 0) == 0 ? 3 : 1;
  };
  for (TensorResult& t : out.tensors) std::sort(t.ranks.begin(), t.ranks.end());
  std::stable_sort(out.tensors.begin(), out.tensors.end(),
                   [&](const TensorResult& x, const TensorResult& y) { return place(x) < place(y); });
  for (const auto& [name, ranks] : absent) {
    std::string where;
    for (int r : ranks) where += (where.empty() ? "" : ", ") + std::to_string(r);
    out.absent.push_back(name + " (rank " + where + ")");
  }
  // Files no rule of the format names: neither read nor compared, said so rather than passed over in silence.
  std::set<std::string> ignored;
  for (const RankDump& r : dump.ranks) {
    std::set<std::string> known;
    for (const TensorSpec& s : rank_tensors(dump, r.rank)) known.insert(s.name);
    for (const auto& [name, file] : r.files)
      if (!known.count(name)) ignored.insert(name);
  }
  out.ignored.assign(ignored.begin(), ignored.end());
  return out;
}

std::vector<std::string> explaining_deviations(const Dump& dump, ExpertPath path) {
  std::vector<std::string> found;
  for (const DeviationInfo& d : deviation_catalogue()) {
    if (d.kind != DeviationKind::modelled) continue;
    Dump other = dump;
    other.config.semantics = dump.config.semantics.with(d.id, !dump.config.semantics.has(d.id));
    try {
      if (compare_dump(other, path).pass())
        found.push_back(std::string(other.config.semantics.has(d.id) ? "+" : "-") + std::string(d.name));
    } catch (const std::exception&) {
      // A semantics this dump cannot be compared under explains nothing.
    }
  }
  return found;
}

}  // namespace moe::compare
