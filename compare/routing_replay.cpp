#include "compare/routing_replay.hpp"

#include "compare/error_model.hpp"
#include "reference/score_functions.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace moe::compare {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The worst pair between `in` (the chosen members) and `out` (the others) of values v within bounds b:
// e ∈ in with the least v_e + b_e against f ∈ out with the largest v_f − b_f.
FlipJudgement worst_pair(const std::vector<double>& v, const std::vector<double>& b, const std::vector<char>& in,
                         const std::vector<char>& eligible) {
  double low = kInf, high = -kInf;
  size_t e = 0, f = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!eligible[i]) continue;
    if (in[i] && v[i] + b[i] < low) {
      low = v[i] + b[i];
      e = i;
    }
    if (!in[i] && v[i] - b[i] > high) {
      high = v[i] - b[i];
      f = i;
    }
  }
  if (high == -kInf) return {true, 0, 0};  // nothing outside could have taken a place
  return {low >= high, v[f] - v[e], b[e] + b[f]};
}

}  // namespace

RowVector<double> ranking_error_bound(const MoeConfig& config, const RowVector<double>& x,
                                      const Matrix<double>& router_weight, const RowVector<double>& logits,
                                      const RowVector<double>& scores, const Vector<double>& expert_bias,
                                      Precision router) {
  const Eigen::Index E = logits.size();
  const double u_r = unit_roundoff(router);
  const double u_a = router == Precision::float64 ? u_r : unit_roundoff(Precision::float32);
  const double u_s = u_r;  // a bf16 router may score in bf16 too (transformers' DeepSeek-V4 gate does)
  const double h = static_cast<double>(x.size());
  RowVector<double> dl(E);
  for (Eigen::Index e = 0; e < E; ++e) {
    const double terms = (x.array() * router_weight.row(e).array()).matrix().norm();
    dl(e) = u_r * std::abs(logits(e)) + std::sqrt(6 * h) * u_a * terms;
  }
  if (config.score_function == ScoreFunction::softmax && !config.pre_softmax) return dl;  // logits are ranked
  RowVector<double> ds(E);
  const double dl_max = dl.maxCoeff();
  for (Eigen::Index e = 0; e < E; ++e) {
    const double s = scores(e);
    double slope_term = 0;
    switch (config.score_function) {
      case ScoreFunction::softmax: slope_term = s * (dl(e) + dl_max); break;
      case ScoreFunction::sigmoid: slope_term = s * (1 - s) * dl(e); break;
      case ScoreFunction::sqrtsoftplus: slope_term = s > 0 ? sigmoid(logits(e)) / (2 * s) * dl(e) : kInf; break;
    }
    ds(e) = slope_term + u_s * std::abs(s);
    if (config.expert_bias) ds(e) += u_s * std::abs(s + expert_bias(e));
  }
  return ds;
}

FlipJudgement judge_flip(const MoeConfig& config, const RowVector<double>& ranking, const RowVector<double>& bound,
                         const std::vector<int>& chosen) {
  const auto E = static_cast<size_t>(ranking.size());
  const std::vector<double> r(ranking.data(), ranking.data() + E), b(bound.data(), bound.data() + E);
  std::vector<char> in(E, 0), eligible(E, 1);
  for (int e : chosen) in[static_cast<size_t>(e)] = 1;
  if (config.num_groups > 0) {
    const auto groups = static_cast<size_t>(config.num_groups), per_group = E / groups;
    const auto counted = static_cast<size_t>(config.topk / config.group_topk);
    std::vector<double> score(groups), score_bound(groups);
    std::vector<char> used(groups, 0);
    for (size_t g = 0; g < groups; ++g) {
      std::vector<size_t> members(per_group);
      std::iota(members.begin(), members.end(), g * per_group);
      std::partial_sort(members.begin(), members.begin() + static_cast<std::ptrdiff_t>(counted), members.end(),
                        [&](size_t p, size_t q) { return r[p] > r[q]; });
      for (size_t i = 0; i < counted; ++i) {
        score[g] += r[members[i]];
        score_bound[g] += b[members[i]];
      }
    }
    for (int e : chosen) used[static_cast<size_t>(e) / per_group] = 1;
    auto kept = static_cast<size_t>(std::count(used.begin(), used.end(), 1));
    if (kept > static_cast<size_t>(config.group_topk)) return {false, kInf, 0};
    // Fill the kept set with the other groups most able to be among the top ones.
    std::vector<size_t> others;
    for (size_t g = 0; g < groups; ++g)
      if (!used[g]) others.push_back(g);
    std::sort(others.begin(), others.end(),
              [&](size_t p, size_t q) { return score[p] + score_bound[p] > score[q] + score_bound[q]; });
    for (size_t i = 0; kept < static_cast<size_t>(config.group_topk) && i < others.size(); ++i, ++kept)
      used[others[i]] = 1;
    const FlipJudgement group = worst_pair(score, score_bound, used, std::vector<char>(groups, 1));
    if (!group.within_rounding) return group;
    for (size_t e = 0; e < E; ++e) eligible[e] = used[e / per_group];
  }
  return worst_pair(r, b, in, eligible);
}

}  // namespace moe::compare
