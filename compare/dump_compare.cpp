#include "compare/dump_compare.hpp"

#include "compare/dump_oracle.hpp"
#include "compare/dump_tensors.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>

namespace moe::compare {
namespace {

// A dump judged by the bf16 error model (reference/tolerance.hpp, kBf16StorageFactor).
bool bf16_model(const Dump& dump) { return dump.precision == to_string(Precision::bfloat16); }

// The spread of d that sizes every element's allowance: its rms, clipped. A few elements can differ by far more than
// the rest where bf16 storage flips a discrete decision (a pre-activation rounded onto the clamp's limit passes no
// gradient, so a whole row of fc1's gradient moves); each of those is covered by its own |d_i|, but in a plain rms they
// set the scale of the whole tensor (on a V4-Flash-shaped layer a typical element of an expert's gradient changed by
// 20% then passed). So the rms is taken again over the elements within kClip times it, until it settles
// (sigma clipping; for normally distributed d it changes nothing measurable). kClip 4 also shrank the spread of a
// plain PyTorch bf16 layer, whose d has heavier tails (0.84 -> 0.97 of its allowance); at 6 it keeps 0.84.
double clipped_rms(const std::vector<double>& d) {
  constexpr double kClip = 6.0;
  constexpr int kRounds = 4;
  double limit = std::numeric_limits<double>::infinity(), rms = 0;
  for (int round = 0; round < kRounds; ++round) {
    double sum_sq = 0;
    size_t kept = 0;
    for (const double v : d)
      if (std::abs(v) <= limit) {
        sum_sq += v * v;
        ++kept;
      }
    const double next = kept == 0 ? 0.0 : std::sqrt(sum_sq / static_cast<double>(kept));
    if (round > 0 && next == rms) break;
    rms = next;
    limit = kClip * rms;
  }
  return rms;
}

// The error model's allowance of each element, on top of the table row's: factor·(|d_i| + spread(d)), d = the
// bf16-storage oracle's values − the double oracle's (the same tensor on the same rank: same sizes).
std::vector<double> bf16_allowance(const Expected& exact, const Expected& stored) {
  const size_t n = exact.values.size();
  std::vector<double> d(n);
  for (size_t i = 0; i < n; ++i) d[i] = stored.values[i] - exact.values[i];
  const double spread = clipped_rms(d);
  for (size_t i = 0; i < n; ++i) d[i] = kBf16StorageFactor * (std::abs(d[i]) + spread);
  return d;
}

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
  const Tolerance tol = dump.tolerance;
  // A bf16 dump: the oracle once more with bf16 storage, whose distance from the double result sizes each tensor's
  // allowance (the error model; docs/numerics.md). Same inputs and routing, so the same expected tensors; both are
  // computed in the same visit of each expert.
  const bool bf16 = bf16_model(dump);
  Comparison out;
  out.backward = has_backward(dump);
  std::map<std::string, size_t> index;  // tensor name -> position in out.tensors
  std::map<std::string, std::vector<int>> absent;

  // Each expected tensor is compared as it arrives and then dropped (the oracle streams the experts).
  const auto judge = [&](const Expected& e, const Expected* stored) {
    if (bf16 && (stored == nullptr || stored->tensor != e.tensor || stored->values.size() != e.values.size()))
      throw DumpError(dump.dir.string() + ": the bf16-storage oracle expects other tensors than the double one");
    const std::vector<double> allowance = bf16 ? bf16_allowance(e, *stored) : std::vector<double>{};
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
                           : bf16   ? Tolerance{tol.atol + allowance[i], tol.rtol}.ratio(got[i], e.values[i])
                                    : tol.ratio(got[i], e.values[i]);
      max_abs = std::max(max_abs, err);
      max_ratio = std::max(max_ratio, ratio);
      if (ratio > 1.0 && first_bad < 0) first_bad = static_cast<std::int64_t>(i);
    }
    t.max_abs = max_abs;
    t.max_ratio = max_ratio;
    if (first_bad >= 0 && !e.near_tie_rows.empty()) {
      const size_t cols = got.size() / e.near_tie_rows.size();
      for (size_t row = 0; row < e.near_tie_rows.size(); ++row) {
        bool differs = false;
        for (size_t c = row * cols; c < (row + 1) * cols && !differs; ++c) differs = got[c] != e.values[c];
        t.rows_differing += differs;
        t.rows_differing_at_near_tie += differs && e.near_tie_rows[row];
      }
    }
    // The first failing element in (rank, index) order, whatever order the ranks arrive in.
    if (first_bad >= 0 && (!t.first || e.rank < t.first->rank))
      t.first = Mismatch{e.rank, first_bad, got[static_cast<size_t>(first_bad)],
                         e.values[static_cast<size_t>(first_bad)]};
  };
  OracleRun run;
  try {
    run = run_oracle(dump, OracleOptions{path, bf16, progress}, judge);
  } catch (const std::invalid_argument& e) {  // the oracle's own validation of inputs and parameters
    throw DumpError(dump.dir.string() + ": the oracle refuses the dump's inputs: " + e.what());
  }
  out.replay_differences = run.replay_differences;
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
