#include "reference/router.hpp"

#include "reference/bf16.hpp"
#include "reference/capacity.hpp"
#include "reference/score_functions.hpp"

#include <algorithm>
#include <limits>
#include <numeric>

namespace moe {
namespace {

// Megatron adds 1e-20 to the renormalising sum and skips renormalisation for k = 1 (but not on hash layers);
// DeepSeek's reference always renormalises, without epsilon.
struct Renormalisation {
  bool apply;
  double eps;
};

Renormalisation renormalisation(const MoeConfig& config) {
  if (config.normalization == Normalization::deepseek) return {true, 0.0};
  return {config.topk > 1 || config.hash_routing, 1e-20};
}

// Group-limited routing: keep the group_topk groups whose top (k / group_topk) ranking scores sum highest;
// everything outside them becomes −∞.
template <typename T>
RowVector<T> mask_to_kept_groups(const MoeConfig& config, const RowVector<T>& ranking) {
  const int groups = config.num_groups;
  const int per_group = config.num_experts / groups;
  const int counted = config.topk / config.group_topk;
  RowVector<T> group_score(groups);
  for (int g = 0; g < groups; ++g) {
    const RowVector<T> members = ranking.segment(g * per_group, per_group);
    T sum = 0;
    for (int i : stable_topk<T>(members, counted)) sum += members(i);
    group_score(g) = sum;
  }
  RowVector<T> masked = RowVector<T>::Constant(ranking.size(), -std::numeric_limits<T>::infinity());
  for (int g : stable_topk<T>(group_score, config.group_topk))
    masked.segment(g * per_group, per_group) = ranking.segment(g * per_group, per_group);
  return masked;
}

template <typename T>
RowVector<T> gather(const RowVector<T>& v, const std::vector<int>& idx) {
  RowVector<T> out(static_cast<Eigen::Index>(idx.size()));
  for (size_t j = 0; j < idx.size(); ++j) out(static_cast<Eigen::Index>(j)) = v(idx[j]);
  return out;
}

// The selected experts of row t of a hash layer: tid2eid[input_ids[b, s]] with t = s·batch + b.
template <typename T>
std::vector<int> hash_selection(const MoeParams<T>& params, const MoeInputs<T>& inputs, int t) {
  const int s = t / inputs.batch;
  const int b = t % inputs.batch;
  const auto id = inputs.input_ids(b, s);
  std::vector<int> selected(static_cast<size_t>(params.tid2eid.cols()));
  for (size_t j = 0; j < selected.size(); ++j)
    selected[j] = static_cast<int>(params.tid2eid(id, static_cast<Eigen::Index>(j)));
  return selected;
}

std::vector<int> replayed_selection(const IndexMatrix& selection, int t) {
  std::vector<int> selected(static_cast<size_t>(selection.cols()));
  for (size_t j = 0; j < selected.size(); ++j) selected[j] = static_cast<int>(selection(t, static_cast<Eigen::Index>(j)));
  return selected;
}

}  // namespace

template <typename T>
std::vector<int> stable_topk(const RowVector<T>& ranking, int k) {
  std::vector<int> order(static_cast<size_t>(ranking.size()));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return ranking(a) > ranking(b); });
  order.resize(static_cast<size_t>(k));
  return order;
}

template <typename T>
RowVector<T> ranking_scores(const MoeConfig& config, const RowVector<T>& logits, const RowVector<T>& scores,
                            const Vector<T>& expert_bias) {
  if (config.score_function == ScoreFunction::softmax) return config.pre_softmax ? scores : logits;
  if (config.expert_bias) return scores + expert_bias.transpose();
  return scores;
}

template <typename T>
RowVector<T> router_scores(const MoeConfig& config, const RowVector<T>& logits) {
  switch (config.score_function) {
    case ScoreFunction::softmax: return softmax<T>(logits);
    case ScoreFunction::sigmoid: return logits.unaryExpr([](T l) { return sigmoid(l); });
    case ScoreFunction::sqrtsoftplus: return logits.unaryExpr([](T l) { return std::sqrt(softplus(l)); });
  }
  return logits;
}

template <typename T>
RowVector<T> router_scores_backward(const MoeConfig& config, const RowVector<T>& logits, const RowVector<T>& scores,
                                    const RowVector<T>& grad_scores) {
  switch (config.score_function) {
    case ScoreFunction::softmax: return softmax_backward<T>(scores, grad_scores);
    case ScoreFunction::sigmoid:
      // dσ/dl = σ(1 − σ)
      return grad_scores.cwiseProduct(scores.cwiseProduct((T(1) - scores.array()).matrix()));
    case ScoreFunction::sqrtsoftplus: {
      // d sqrt(sp(l))/dl = sp'(l) / (2·sqrt(sp(l)))
      RowVector<T> g(logits.size());
      for (Eigen::Index e = 0; e < logits.size(); ++e)
        g(e) = grad_scores(e) * softplus_grad(logits(e)) / (T(2) * scores(e));
      return g;
    }
  }
  return grad_scores;
}

template <typename T>
std::vector<int> select_experts(const MoeConfig& config, const RowVector<T>& logits, const RowVector<T>& scores,
                                const Vector<T>& expert_bias) {
  RowVector<T> ranking = ranking_scores(config, logits, scores, expert_bias);
  if (config.num_groups > 0) ranking = mask_to_kept_groups(config, ranking);
  return stable_topk<T>(ranking, config.topk);
}

template <typename T>
RowVector<T> topk_weights(const MoeConfig& config, const RowVector<T>& logits, const RowVector<T>& scores,
                          const std::vector<int>& selected) {
  const T alpha = static_cast<T>(config.topk_scaling_factor);
  if (config.score_function == ScoreFunction::softmax) {
    const bool post = !config.pre_softmax && !config.hash_routing;
    return alpha * (post ? softmax<T>(gather(logits, selected)) : gather(scores, selected));
  }
  const RowVector<T> picked = gather(scores, selected);
  const Renormalisation rn = renormalisation(config);
  if (!rn.apply) return alpha * picked;
  // Normalise, then scale (Megatron and DeepSeek's order): α·(s/Σs), not (α·s)/Σs, whose rounding breaks the exact
  // ties of equal weights (k = 1 normalised weights are all exactly α) that capacity dropping ranks by.
  return alpha * (picked / (picked.sum() + static_cast<T>(rn.eps)));
}

template <typename T>
RowVector<T> topk_weights_backward(const MoeConfig& config, const RowVector<T>& logits, const RowVector<T>& scores,
                                   const std::vector<int>& selected, const RowVector<T>& grad_weights) {
  const T alpha = static_cast<T>(config.topk_scaling_factor);
  const RowVector<T> grad_picked_scaled = alpha * grad_weights;  // dL/d(weights before α)
  RowVector<T> grad_logits = RowVector<T>::Zero(logits.size());

  if (config.score_function == ScoreFunction::softmax && !config.pre_softmax && !config.hash_routing) {
    // Post-softmax: the softmax runs over the selected logits only.
    const RowVector<T> q = softmax<T>(gather(logits, selected));
    const RowVector<T> dl = softmax_backward<T>(q, grad_picked_scaled);
    for (size_t j = 0; j < selected.size(); ++j) grad_logits(selected[j]) += dl(static_cast<Eigen::Index>(j));
    return grad_logits;
  }

  RowVector<T> grad_picked = grad_picked_scaled;
  if (config.score_function != ScoreFunction::softmax) {
    const Renormalisation rn = renormalisation(config);
    if (rn.apply) grad_picked = normalise_backward<T>(gather(scores, selected), static_cast<T>(rn.eps), grad_picked);
  }
  RowVector<T> grad_scores = RowVector<T>::Zero(scores.size());
  for (size_t j = 0; j < selected.size(); ++j) grad_scores(selected[j]) += grad_picked(static_cast<Eigen::Index>(j));
  return router_scores_backward(config, logits, scores, grad_scores);
}

template <typename T>
Routing<T> route(const MoeConfig& config, const MoeParams<T>& params, const MoeInputs<T>& inputs) {
  const int tokens = static_cast<int>(inputs.x.rows());
  const int experts = config.num_experts;
  Routing<T> r;
  r.logits = stored(config.bf16_router, Matrix<T>(inputs.x * params.router_weight.transpose()));
  r.scores.resize(tokens, experts);
  r.selected.resize(tokens, config.topk);
  r.topk_weights.resize(tokens, config.topk);
  Matrix<T> probs = Matrix<T>::Zero(tokens, experts);
  BoolMatrix routed = BoolMatrix::Constant(tokens, experts, false);

  for (int t = 0; t < tokens; ++t) {
    const RowVector<T> logits = r.logits.row(t);
    const RowVector<T> scores = stored(config.bf16_router, router_scores(config, logits));
    r.scores.row(t) = scores;
    const std::vector<int> selected = config.hash_routing ? hash_selection(params, inputs, t)
                                      : inputs.selection  ? replayed_selection(*inputs.selection, t)
                                                          : select_experts(config, logits, scores, params.expert_bias);
    const RowVector<T> weights = stored(config.bf16_router, topk_weights(config, logits, scores, selected));
    for (int j = 0; j < config.topk; ++j) {
      r.selected(t, j) = selected[static_cast<size_t>(j)];
      r.topk_weights(t, j) = weights(j);
      probs(t, selected[static_cast<size_t>(j)]) = weights(j);
      routed(t, selected[static_cast<size_t>(j)]) = true;
    }
  }

  std::vector<std::vector<int>> partition = inputs.partition;
  if (partition.empty()) {
    partition.emplace_back(static_cast<size_t>(tokens));
    std::iota(partition[0].begin(), partition[0].end(), 0);
  }
  if (config.capacity_factor) {
    const CapacityResult cap = inputs.capacity_decision
                                   ? replay_capacity(config, routed, *inputs.capacity_decision, partition)
                                   : apply_capacity(config, routed, probs, partition);
    r.routing_map = (cap.keep.array() || cap.padded.array()).matrix();
    r.padded_slot = cap.padded;
    r.probs = probs.cwiseProduct(cap.keep.cast<T>());
  } else {
    r.routing_map = routed;
    r.padded_slot = BoolMatrix::Constant(tokens, experts, false);
    r.probs = probs;
  }

  config.check_padding_supported(std::find(inputs.padding_mask.begin(), inputs.padding_mask.end(), true) !=
                                 inputs.padding_mask.end());
  // Bias counts: real assignments of valid tokens; Megatron counts the padded slots too (bias-counts-padded-slots).
  const bool count_padded_slots = config.semantics.has(Deviation::bias_counts_padded_slots);
  r.tokens_per_expert.assign(static_cast<size_t>(experts), 0);
  r.bias_counts.assign(static_cast<size_t>(experts), 0);
  for (int t = 0; t < tokens; ++t) {
    const bool padded_token = !inputs.padding_mask.empty() && inputs.padding_mask[static_cast<size_t>(t)];
    for (int e = 0; e < experts; ++e) {
      if (!r.routing_map(t, e)) continue;
      ++r.tokens_per_expert[static_cast<size_t>(e)];
      if ((!r.padded_slot(t, e) || count_padded_slots) && !padded_token) ++r.bias_counts[static_cast<size_t>(e)];
    }
  }
  return r;
}

template <typename T>
Matrix<T> route_backward(const MoeConfig& config, const Routing<T>& routing, const Matrix<T>& grad_probs) {
  const auto tokens = routing.logits.rows();
  Matrix<T> grad_logits(tokens, routing.logits.cols());
  for (Eigen::Index t = 0; t < tokens; ++t) {
    std::vector<int> selected(static_cast<size_t>(config.topk));
    RowVector<T> grad_weights(config.topk);
    for (int j = 0; j < config.topk; ++j) {
      const int e = static_cast<int>(routing.selected(t, j));
      selected[static_cast<size_t>(j)] = e;
      const bool kept = routing.routing_map(t, e) && !routing.padded_slot(t, e);
      grad_weights(j) = kept ? grad_probs(t, e) : T(0);
    }
    grad_logits.row(t) = topk_weights_backward<T>(config, routing.logits.row(t), routing.scores.row(t), selected,
                                                  grad_weights);
  }
  return grad_logits;
}

#define MOE_INSTANTIATE_ROUTER(T)                                                                                  \
  template std::vector<int> stable_topk<T>(const RowVector<T>&, int);                                              \
  template RowVector<T> router_scores<T>(const MoeConfig&, const RowVector<T>&);                                   \
  template RowVector<T> ranking_scores<T>(const MoeConfig&, const RowVector<T>&, const RowVector<T>&,              \
                                          const Vector<T>&);                                                       \
  template RowVector<T> router_scores_backward<T>(const MoeConfig&, const RowVector<T>&, const RowVector<T>&,      \
                                                  const RowVector<T>&);                                            \
  template std::vector<int> select_experts<T>(const MoeConfig&, const RowVector<T>&, const RowVector<T>&,          \
                                              const Vector<T>&);                                                   \
  template RowVector<T> topk_weights<T>(const MoeConfig&, const RowVector<T>&, const RowVector<T>&,                \
                                        const std::vector<int>&);                                                  \
  template RowVector<T> topk_weights_backward<T>(const MoeConfig&, const RowVector<T>&, const RowVector<T>&,       \
                                                 const std::vector<int>&, const RowVector<T>&);                    \
  template Routing<T> route<T>(const MoeConfig&, const MoeParams<T>&, const MoeInputs<T>&);                        \
  template Matrix<T> route_backward<T>(const MoeConfig&, const Routing<T>&, const Matrix<T>&);
MOE_INSTANTIATE_ROUTER(double)
MOE_INSTANTIATE_ROUTER(float)

}  // namespace moe
