#include "distributed/train/local_router.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace moe::dist {
namespace {

template <typename T>
using Array = Eigen::Array<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Whole-matrix score functions.
template <typename T>
Matrix<T> score_matrix(ScoreFunction f, const Matrix<T>& logits) {
  const Array<T> l = logits.array();
  switch (f) {
    case ScoreFunction::softmax: {
      Array<T> e = (l.colwise() - l.rowwise().maxCoeff()).exp();
      e.colwise() /= e.rowwise().sum();
      return e.matrix();
    }
    case ScoreFunction::sigmoid: return (T(1) / (T(1) + (-l).exp())).matrix();
    case ScoreFunction::sqrtsoftplus: return (l > T(20)).select(l, l.exp().log1p()).sqrt().matrix();
  }
  return logits;
}

// The indices of the `k` largest entries of `row`, largest first, lower index first among equals.
template <typename T>
std::vector<int> top_indices(const T* row, int n, int k) {
  std::vector<int> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                    [row](int a, int b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
  idx.resize(static_cast<size_t>(k));
  return idx;
}

// Megatron: renormalise over k > 1 (always on hash layers) with +1e-20; DeepSeek: always, exactly.
std::pair<bool, double> renormalisation(const MoeConfig& c) {
  if (c.normalization == Normalization::deepseek) return {true, 0.0};
  return {c.topk > 1 || c.hash_routing, 1e-20};
}

template <typename T>
std::vector<int> choose(const MoeConfig& c, const Matrix<T>& ranking, Eigen::Index t) {
  const int E = c.num_experts;
  if (c.num_groups == 0) return top_indices(ranking.row(t).data(), E, c.topk);
  // Group-limited: score each contiguous group by its top (k / group_topk) entries, keep group_topk groups.
  const int per = E / c.num_groups;
  std::vector<T> group_score(static_cast<size_t>(c.num_groups));
  for (int g = 0; g < c.num_groups; ++g) {
    const T* members = ranking.row(t).data() + g * per;
    T sum = 0;
    for (int i : top_indices(members, per, c.topk / c.group_topk)) sum += members[i];
    group_score[static_cast<size_t>(g)] = sum;
  }
  RowVector<T> masked = RowVector<T>::Constant(E, -std::numeric_limits<T>::infinity());
  for (int g : top_indices(group_score.data(), c.num_groups, c.group_topk))
    masked.segment(g * per, per) = ranking.row(t).segment(g * per, per);
  return top_indices(masked.data(), E, c.topk);
}

// Drops over-capacity assignments and pads under-full experts, all rows being one source rank.
template <typename T>
void apply_capacity(const MoeConfig& c, LocalRouting<T>& r) {
  const auto n = r.probs.rows();
  const int cap = static_cast<int>(std::ceil(static_cast<double>(n) * c.topk / c.num_experts * *c.capacity_factor));
  for (int e = 0; e < c.num_experts; ++e) {
    std::vector<Eigen::Index> routed;
    for (Eigen::Index t = 0; t < n; ++t)
      if (r.routing_map(t, e)) routed.push_back(t);
    if (static_cast<int>(routed.size()) > cap) {
      if (c.drop_policy == DropPolicy::probs)
        std::stable_sort(routed.begin(), routed.end(),
                         [&](Eigen::Index a, Eigen::Index b) { return r.probs(a, e) > r.probs(b, e); });
      for (size_t i = static_cast<size_t>(cap); i < routed.size(); ++i) {
        r.routing_map(routed[i], e) = false;
        r.probs(routed[i], e) = 0;
      }
    } else if (c.pad_to_capacity) {
      auto missing = std::min<Eigen::Index>(cap, n) - static_cast<Eigen::Index>(routed.size());
      for (Eigen::Index t = 0; t < n && missing > 0; ++t) {
        if (r.routing_map(t, e)) continue;
        r.routing_map(t, e) = r.padded(t, e) = true;
        --missing;
      }
    }
  }
}

}  // namespace

template <typename T>
LocalRouting<T> route_local(const MoeConfig& c, const Matrix<T>& x, const Matrix<T>& router_weight,
                            const Vector<T>& expert_bias, const IndexMatrix& tid2eid, const RouterInputs& in) {
  const Eigen::Index n = x.rows();
  const int E = c.num_experts, k = c.topk;
  const T alpha = static_cast<T>(c.topk_scaling_factor);
  LocalRouting<T> r;
  r.logits.noalias() = x * router_weight.transpose();
  r.scores = score_matrix(c.score_function, r.logits);
  Matrix<T> ranking = c.score_function == ScoreFunction::softmax ? (c.pre_softmax ? r.scores : r.logits) : r.scores;
  if (c.expert_bias) ranking.rowwise() += expert_bias.transpose();

  r.topk.resize(n, k);
  r.probs = Matrix<T>::Zero(n, E);
  r.routing_map = BoolMatrix::Constant(n, E, false);
  r.padded = BoolMatrix::Constant(n, E, false);
  const auto [renormalise, eps] = renormalisation(c);
  for (Eigen::Index t = 0; t < n; ++t) {
    std::vector<int> chosen;
    if (c.hash_routing) {
      for (int j = 0; j < k; ++j) chosen.push_back(static_cast<int>(tid2eid(in.token_ids(t), j)));
    } else {
      chosen = choose(c, ranking, t);
    }
    RowVector<T> w(k);
    for (int j = 0; j < k; ++j) w(j) = r.scores(t, chosen[static_cast<size_t>(j)]);
    if (c.score_function == ScoreFunction::softmax && !c.pre_softmax && !c.hash_routing) {
      for (int j = 0; j < k; ++j) w(j) = r.logits(t, chosen[static_cast<size_t>(j)]);
      w = (w.array() - w.maxCoeff()).exp();
      w /= w.sum();
    } else if (c.score_function != ScoreFunction::softmax && renormalise) {
      w /= w.sum() + static_cast<T>(eps);
    }
    for (int j = 0; j < k; ++j) {
      const int e = chosen[static_cast<size_t>(j)];
      r.topk(t, j) = e;
      r.probs(t, e) = alpha * w(j);
      r.routing_map(t, e) = true;
    }
  }
  if (c.capacity_factor) apply_capacity(c, r);

  c.check_padding_supported(std::find(in.padding_mask.begin(), in.padding_mask.end(), true) != in.padding_mask.end());
  // Real assignments of valid tokens; with bias-counts-padded-slots (Megatron) the padded slots count too.
  const BoolMatrix counted = c.semantics.has(Deviation::bias_counts_padded_slots)
                                 ? r.routing_map
                                 : BoolMatrix(r.routing_map.array() && !r.padded.array());
  r.assignments.assign(static_cast<size_t>(E), 0);
  for (Eigen::Index t = 0; t < n; ++t) {
    if (!in.padding_mask.empty() && in.padding_mask[static_cast<size_t>(t)]) continue;
    for (int e = 0; e < E; ++e) r.assignments[static_cast<size_t>(e)] += counted(t, e);
  }
  return r;
}

template <typename T>
Matrix<T> route_local_backward(const MoeConfig& c, const LocalRouting<T>& r, const Matrix<T>& grad_probs) {
  const Eigen::Index n = r.logits.rows();
  const int k = c.topk;
  const T alpha = static_cast<T>(c.topk_scaling_factor);
  const auto [renormalise, eps] = renormalisation(c);
  Matrix<T> grad_scores = Matrix<T>::Zero(n, c.num_experts);
  Matrix<T> grad_logits = Matrix<T>::Zero(n, c.num_experts);
  const bool post_softmax = c.score_function == ScoreFunction::softmax && !c.pre_softmax && !c.hash_routing;

  for (Eigen::Index t = 0; t < n; ++t) {
    RowVector<T> dw(k), picked(k);
    for (int j = 0; j < k; ++j) {
      const auto e = r.topk(t, j);
      const bool kept = r.routing_map(t, e) && !r.padded(t, e);
      dw(j) = kept ? alpha * grad_probs(t, e) : T(0);
      picked(j) = post_softmax ? r.logits(t, e) : r.scores(t, e);
    }
    if (post_softmax) {
      RowVector<T> q = (picked.array() - picked.maxCoeff()).exp();
      q /= q.sum();
      const RowVector<T> dl = q.cwiseProduct((dw.array() - q.dot(dw)).matrix());
      for (int j = 0; j < k; ++j) grad_logits(t, r.topk(t, j)) += dl(j);
      continue;
    }
    if (c.score_function != ScoreFunction::softmax && renormalise) {
      const T denom = picked.sum() + static_cast<T>(eps);
      dw = (dw.array() / denom - dw.dot(picked) / (denom * denom)).matrix();
    }
    for (int j = 0; j < k; ++j) grad_scores(t, r.topk(t, j)) += dw(j);
  }
  if (post_softmax) return grad_logits;

  return score_backward(c.score_function, r.logits, r.scores, grad_scores);
}

template <typename T>
Matrix<T> score_backward(ScoreFunction f, const Matrix<T>& logits, const Matrix<T>& scores,
                         const Matrix<T>& grad_scores) {
  const Array<T> s = scores.array(), g = grad_scores.array();
  switch (f) {
    case ScoreFunction::softmax: return (s * (g.colwise() - (s * g).rowwise().sum())).matrix();
    case ScoreFunction::sigmoid: return (g * s * (T(1) - s)).matrix();
    case ScoreFunction::sqrtsoftplus: {
      const Array<T> l = logits.array();
      const Array<T> dsp = (l > T(20)).select(Array<T>::Ones(l.rows(), l.cols()), T(1) / (T(1) + (-l).exp()));
      return (g * dsp / (T(2) * s)).matrix();
    }
  }
  return grad_scores;
}

template LocalRouting<double> route_local<double>(const MoeConfig&, const Matrix<double>&, const Matrix<double>&,
                                                  const Vector<double>&, const IndexMatrix&, const RouterInputs&);
template LocalRouting<float> route_local<float>(const MoeConfig&, const Matrix<float>&, const Matrix<float>&,
                                                const Vector<float>&, const IndexMatrix&, const RouterInputs&);
template Matrix<double> route_local_backward<double>(const MoeConfig&, const LocalRouting<double>&,
                                                     const Matrix<double>&);
template Matrix<float> route_local_backward<float>(const MoeConfig&, const LocalRouting<float>&, const Matrix<float>&);
template Matrix<double> score_backward<double>(ScoreFunction, const Matrix<double>&, const Matrix<double>&,
                                               const Matrix<double>&);
template Matrix<float> score_backward<float>(ScoreFunction, const Matrix<float>&, const Matrix<float>&,
                                             const Matrix<float>&);

}  // namespace moe::dist
