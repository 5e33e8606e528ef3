#include "compare/step_update.hpp"

#include "compare/parameter_shard.hpp"
#include "golden/model_case_oracle.hpp"

#include <algorithm>
#include <cmath>

namespace moe::compare {

namespace {

// The moments a step starts from, over one rank's shard: zero before a first step.
struct Moments {
  std::vector<double> m, v;
  int steps_before = 0;
};

// θ after Adam's next step from `from` with gradient g (reference/optimizer.hpp's arithmetic).
std::vector<double> adam_step_from(const AdamConfig& adam, const Moments& from, std::vector<double> theta,
                                   std::vector<double> g) {
  const auto n = static_cast<Eigen::Index>(theta.size());
  const TensorView<double> param{"", theta.data(), n, {n}}, grad{"", g.data(), n, {n}};
  AdamState state;
  if (from.steps_before > 0) {
    state.m = {from.m};
    state.v = {from.v};
    state.step = from.steps_before;
  }
  begin_adam_step(state, {param});
  adamw_tensor(adam, state, 0, param, grad);
  return theta;
}

// Where the update (β1·m + (1 − β1)·g) / √(β2·v + (1 − β2)·g²) of element i is stationary in g: b·c / (a·d) for
// a = β1·m, b = 1 − β1, c = β2·v, d = 1 − β2 (eps aside), when it lies inside (low, high); else the interval's
// midpoint (no extremum inside: the ends bound the update). From zero moments the update is monotone in g.
std::vector<double> stationary_points(const AdamConfig& adam, const Moments& from, const std::vector<double>& low,
                                      const std::vector<double>& high) {
  std::vector<double> g(low.size());
  for (size_t i = 0; i < g.size(); ++i) {
    g[i] = 0.5 * (low[i] + high[i]);
    if (from.steps_before == 0 || from.m[i] == 0) continue;
    const double star = (1 - adam.beta1) * adam.beta2 * from.v[i] / (adam.beta1 * from.m[i] * (1 - adam.beta2));
    if (star > low[i] && star < high[i]) g[i] = star;
  }
  return g;
}

// Compares one rank's array with the oracle's, into t: element i passes within [low_i, high_i], the values a
// correct run may hold; its share of the tolerance is its distance from the oracle's value over the band's
// extent on that side.
void judge(StepTensorResult& t, int rank, const std::vector<double>& got, const std::vector<double>& want,
           const std::vector<double>& low, const std::vector<double>& high) {
  t.ranks.push_back(rank);
  t.elements = static_cast<std::int64_t>(got.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const double diff = saturated(got[i] - want[i]);
    const double room = diff >= 0 ? high[i] - want[i] : want[i] - low[i];
    const bool inside = got[i] >= low[i] && got[i] <= high[i];
    const double ratio = room > 0 ? saturated(std::abs(diff) / room) : (diff == 0 ? 0 : saturated(HUGE_VAL));
    t.max_abs = std::max(t.max_abs, std::abs(diff));
    if (!inside && t.first_rank < 0) {
      t.first_rank = rank;
      t.first_index = static_cast<std::int64_t>(i);
      t.got = got[i];
      t.want = want[i];
    }
    // Outside the band is a failure whatever the ratio says (the oracle's value sits inside it by construction).
    t.worst = std::max(t.worst, inside ? std::min(ratio, 1.0) : std::max(ratio, std::nextafter(1.0, 2.0)));
  }
}
// Adam's moments after the step, m′ = β1·m + (1 − β1)·ĝ and v′ = β2·v + (1 − β2)·ĝ² from the moments it started
// from, for the clipped gradient ĝ (mid, within [low, high]) over the shard's elements [begin, end): each within the
// moments of the interval's ends (ĝ²'s lower end 0 where the interval holds 0), widened by its own rounding.
template <class Allowed>
void judge_moments(const AdamConfig& adam, const Moments& from, std::int64_t begin, std::int64_t end,
                   const std::vector<double>& mid, const std::vector<double>& low, const std::vector<double>& high,
                   const Allowed& allowed, const std::map<std::string, formats::NpyArray>& state, int rank,
                   StepTensorResult& m_result, StepTensorResult& v_result) {
  const auto n = static_cast<size_t>(end - begin);
  std::vector<double> m(n), m_low(n), m_high(n), v(n), v_low(n), v_high(n);
  for (size_t k = 0; k < n; ++k) {
    const size_t i = static_cast<size_t>(begin) + k;
    const double m0 = from.steps_before > 0 ? adam.beta1 * from.m[i] : 0,
                 v0 = from.steps_before > 0 ? adam.beta2 * from.v[i] : 0;
    m[k] = m0 + (1 - adam.beta1) * mid[i];
    m_low[k] = m0 + (1 - adam.beta1) * low[i] - allowed(m[k]);
    m_high[k] = m0 + (1 - adam.beta1) * high[i] + allowed(m[k]);
    const double sq_low = low[i] <= 0 && high[i] >= 0 ? 0 : std::min(low[i] * low[i], high[i] * high[i]);
    v[k] = v0 + (1 - adam.beta2) * mid[i] * mid[i];
    v_low[k] = v0 + (1 - adam.beta2) * sq_low - allowed(v[k]);
    v_high[k] = v0 + (1 - adam.beta2) * std::max(low[i] * low[i], high[i] * high[i]) + allowed(v[k]);
  }
  judge(m_result, rank, state.at(m_result.stem).reals, m, m_low, m_high);
  judge(v_result, rank, state.at(v_result.stem).reals, v, v_low, v_high);
}

}  // namespace

void compare_step_end(const StepDump& d, const std::map<std::string, formats::NpyArray>& oracle, StepComparison& c) {
  const Tolerance& tol = c.tolerance;
  const auto allowed = [&tol](double v) { return tol.atol + tol.rtol * std::abs(v); };
  // The oracle's norm and how far a gradient within its tolerance may move it.
  double squares = 0, slack = 0;
  for (const auto& [name, g] : oracle) {
    if (name.rfind("grad.", 0) != 0) continue;
    for (double v : g.reals) {
      squares += v * v;
      slack += allowed(v) * allowed(v);
    }
  }
  const double norm = std::sqrt(squares), norm_allowance = std::sqrt(slack) + tol.rtol * norm;
  if (!d.reported_grad_norm.empty()) {
    ReportedResult r{norm, norm_allowance, d.reported_grad_norm, -1, 0};
    for (size_t rank = 0; rank < r.got.size(); ++rank) {
      const double ratio = saturated(std::abs(r.got[rank] - norm) / norm_allowance);
      if (ratio > r.worst || r.worst_rank < 0) {
        r.worst = ratio;
        r.worst_rank = static_cast<int>(rank);
      }
    }
    c.grad_norm = r;
  }
  if (d.reported_lm_loss) {
    // The CE per valid token over the global batch is the per-token objective's CE term whatever the dump's loss
    // mode (the forward is the same): read from the oracle's step in that mode.
    double want = 0;
    if (d.loss_mode == LossMode::per_token) {
      want = oracle.at("ce_term").reals.at(0);
    } else {
      golden::ModelCaseHeader h = oracle_header(d);
      h.loss_mode = LossMode::per_token;
      want = golden::model_oracle_outputs(h, {d.params, d.batch}).at("ce_term").reals.at(0);
    }
    const double got = *d.reported_lm_loss, allowance = allowed(want);
    c.lm_loss = ReportedResult{want, allowance, {got}, 0, saturated(std::abs(got - want) / allowance)};
  }
  if (!d.optimizer) return;

  // Clipping's coefficient at the norm and at the ends of the norm's interval (it falls as the norm grows).
  const double clip = d.optimizer->clip_grad;
  const auto coefficient = [clip](double n) { return clip > 0 ? clip_coefficient(clip, std::max(n, 0.0)) : 1.0; };
  const double c_mid = coefficient(norm), c_low = coefficient(norm + norm_allowance),
               c_high = coefficient(norm - norm_allowance);
  const ProcessGroups groups(d.layout);
  for (const auto& [name, whole_grad] : oracle) {
    if (name.rfind("grad.", 0) != 0) continue;
    const std::string stem = name.substr(5);
    StepTensorResult t;
    t.stem = stem;
    t.cls = parameter_class(stem);
    AdamConfig adam = d.optimizer->adam;
    const auto& skip = d.optimizer->no_decay;
    if (std::find(skip.begin(), skip.end(), t.cls) != skip.end()) adam.weight_decay = 0;
    StepTensorResult m_result, v_result;  // Adam's two moments of this parameter
    m_result.stem = "exp_avg." + stem;
    v_result.stem = "exp_avg_sq." + stem;
    m_result.cls = v_result.cls = t.cls;
    for (int r = 0; r < d.layout.world; ++r) {
      const auto& mine = d.params_after[static_cast<size_t>(r)];
      const auto it = mine.find(stem);
      if (it == mine.end()) continue;
      const ParameterShard shard = parameter_shard(stem, groups, r);
      const std::vector<double> g = take_shard(whole_grad.reals, whole_grad.shape, shard);
      const std::vector<double> theta = take_shard(d.initial.at(stem).reals, whole_grad.shape, shard);
      std::vector<double> mid(g.size()), low(g.size()), high(g.size());
      for (size_t i = 0; i < g.size(); ++i) {
        const double a = g[i] - allowed(g[i]), b = g[i] + allowed(g[i]);
        mid[i] = c_mid * g[i];
        low[i] = std::min(c_low * a, c_high * a);
        high[i] = std::max(c_low * b, c_high * b);
      }
      Moments from{{}, {}, d.optimizer->steps_before};
      if (from.steps_before > 0) {
        from.m = take_shard(d.initial_moments.at("exp_avg." + stem).reals, whole_grad.shape, shard);
        from.v = take_shard(d.initial_moments.at("exp_avg_sq." + stem).reals, whole_grad.shape, shard);
      }
      const std::vector<double> want = adam_step_from(adam, from, theta, mid);
      const std::vector<double> at_low = adam_step_from(adam, from, theta, low);
      const std::vector<double> at_high = adam_step_from(adam, from, theta, high);
      const std::vector<double> at_stationary =
          adam_step_from(adam, from, theta, stationary_points(adam, from, low, high));
      std::vector<double> band_low(g.size()), band_high(g.size());
      for (size_t i = 0; i < g.size(); ++i) {
        band_low[i] = std::min({at_low[i], at_high[i], at_stationary[i], want[i]}) - allowed(want[i]);
        band_high[i] = std::max({at_low[i], at_high[i], at_stationary[i], want[i]}) + allowed(want[i]);
      }
      judge(t, r, it->second.reals, want, band_low, band_high);
      if (d.optimizer->state && d.state[static_cast<size_t>(r)].count("exp_avg." + stem)) {
        const GradRange range = d.grad_range(r, stem, static_cast<std::int64_t>(g.size()));  // the moments' part
        judge_moments(adam, from, range.start, range.end, mid, low, high, allowed, d.state[static_cast<size_t>(r)], r,
                      m_result, v_result);
      }
    }
    c.after.push_back(std::move(t));
    if (!m_result.ranks.empty()) {
      c.state.push_back(std::move(m_result));
      c.state.push_back(std::move(v_result));
    }
  }
  // The expert bias: the oracle's update where the layer has one, else the bias it started from.
  for (int l = 0; l < d.model.num_blocks(); ++l) {
    const std::string stem = d.model.block_prefix(l) + "expert_bias";
    if (!d.initial.count(stem)) continue;
    const auto updated = oracle.find(d.model.block_prefix(l) + "expert_bias_updated");
    const std::vector<double>& want = updated != oracle.end() ? updated->second.reals : d.initial.at(stem).reals;
    std::vector<double> low(want.size()), high(want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      low[i] = want[i] - allowed(want[i]);
      high[i] = want[i] + allowed(want[i]);
    }
    StepTensorResult t;
    t.stem = stem;
    t.cls = ParameterClass::router;
    for (int r = 0; r < d.layout.world; ++r)
      if (holds(stem, groups, r, d.model, d.vpp))
        judge(t, r, d.params_after[static_cast<size_t>(r)].at(stem).reals, want, low, high);
    c.after.push_back(std::move(t));
  }
}

}  // namespace moe::compare
