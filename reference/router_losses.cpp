#include "reference/router_losses.hpp"

#include "reference/router.hpp"
#include "reference/score_functions.hpp"

#include <cmath>
#include <numeric>

namespace moe {
namespace {

constexpr double kAuxEps = 1e-20;  // Megatron's compute_routing_scores_for_aux_loss

bool is_valid(const std::vector<bool>& padding_mask, Eigen::Index t) {
  return padding_mask.empty() || !padding_mask[static_cast<size_t>(t)];
}

// weight · coeff·E/(k·n²)·Σ_e P_e·c_e with P summed over `rows` and n the statistic's token count (the rows
// themselves, unless the group is larger); adds d/ds' of it for those rows to grad_normalised.
template <typename T>
T switch_term(const MoeConfig& config, const Matrix<T>& normalised, const std::vector<Eigen::Index>& rows,
              const std::vector<double>& counts, double n, double weight, Matrix<T>& grad_normalised) {
  if (rows.empty()) return 0;
  const double scale = weight * config.aux_loss_coeff * config.num_experts / (config.topk * n * n);
  T value = 0;
  for (Eigen::Index t : rows) {
    for (Eigen::Index e = 0; e < normalised.cols(); ++e) {
      const T c = static_cast<T>(counts[static_cast<size_t>(e)]);
      value += static_cast<T>(scale) * normalised(t, e) * c;
      grad_normalised(t, e) += static_cast<T>(scale) * c;
    }
  }
  return value;
}

std::vector<double> count_rows(const BoolMatrix& aux_map, const std::vector<Eigen::Index>& rows) {
  std::vector<double> counts(static_cast<size_t>(aux_map.cols()), 0.0);
  for (Eigen::Index t : rows)
    for (Eigen::Index e = 0; e < aux_map.cols(); ++e)
      if (aux_map(t, e)) counts[static_cast<size_t>(e)] += 1;
  return counts;
}

}  // namespace

template <typename T>
RowVector<T> aux_scores(const MoeConfig& config, const RowVector<T>& scores) {
  if (config.score_function == ScoreFunction::softmax) return scores;
  return scores / (scores.sum() + static_cast<T>(kAuxEps));
}

template <typename T>
AuxLoss<T> aux_loss(const MoeConfig& config, const Routing<T>& routing, const MoeInputs<T>& inputs) {
  const std::vector<bool>& padding_mask = inputs.padding_mask;
  const auto tokens = routing.scores.rows();
  const auto experts = routing.scores.cols();
  Matrix<T> normalised(tokens, experts);
  BoolMatrix aux_map = BoolMatrix::Constant(tokens, experts, false);
  for (Eigen::Index t = 0; t < tokens; ++t) {
    normalised.row(t) = aux_scores<T>(config, routing.scores.row(t));
    for (int e : stable_topk<T>(normalised.row(t), config.topk)) aux_map(t, e) = true;
  }

  std::vector<Eigen::Index> valid;
  for (Eigen::Index t = 0; t < tokens; ++t)
    if (is_valid(padding_mask, t)) valid.push_back(t);

  AuxLoss<T> out;
  out.global_aux = inputs.global_aux;
  const std::vector<double> counts = count_rows(aux_map, valid);
  out.counts.assign(counts.begin(), counts.end());
  Matrix<T> grad_normalised = Matrix<T>::Zero(tokens, experts);

  switch (config.aux_loss_type) {
    case AuxLossType::aux:
      out.value = switch_term(config, normalised, valid, counts, static_cast<double>(valid.size()), 1.0,
                              grad_normalised);
      break;
    case AuxLossType::seq_aux: {
      // Sequence b is the rows {s·batch + b}; its T is its valid length, or with seq-aux-mean-length (Megatron)
      // the mean valid length of the call's sequences.
      const double mean_length = static_cast<double>(valid.size()) / inputs.batch;
      for (int b = 0; b < inputs.batch; ++b) {
        std::vector<Eigen::Index> rows;
        for (int s = 0; s < inputs.seq; ++s) {
          const Eigen::Index t = static_cast<Eigen::Index>(s) * inputs.batch + b;
          if (is_valid(padding_mask, t)) rows.push_back(t);
        }
        const double length = config.semantics.has(Deviation::seq_aux_mean_length) ? mean_length
                                                                                     : static_cast<double>(rows.size());
        // The mean over sequences: each sequence's term enters with weight 1/batch.
        out.value += switch_term(config, normalised, rows, count_rows(aux_map, rows), length, 1.0 / inputs.batch,
                                 grad_normalised);
      }
      break;
    }
    case AuxLossType::global_aux: {
      const auto& group = inputs.global_aux_group;
      const std::vector<double>& step_counts = group ? group->counts : counts;
      std::vector<double>& sum = out.global_aux.tokens_per_expert_sum;
      if (sum.empty()) sum.assign(static_cast<size_t>(experts), 0.0);
      for (size_t e = 0; e < sum.size(); ++e) sum[e] += step_counts[e];
      out.global_aux.steps += 1;
      std::vector<double> averaged(sum.size());
      for (size_t e = 0; e < sum.size(); ++e) averaged[e] = sum[e] / out.global_aux.steps;
      const double group_tokens = group ? group->tokens : static_cast<double>(valid.size());
      out.value = switch_term(config, normalised, valid, averaged, group_tokens, 1.0, grad_normalised);
      break;
    }
    case AuxLossType::none: break;
  }

  out.row_values = (grad_normalised.array() * normalised.array()).rowwise().sum();
  out.grad_logits.resize(tokens, experts);
  for (Eigen::Index t = 0; t < tokens; ++t) {
    const RowVector<T> scores = routing.scores.row(t);
    RowVector<T> grad_scores = grad_normalised.row(t);
    if (config.score_function != ScoreFunction::softmax)
      grad_scores = normalise_backward<T>(scores, static_cast<T>(kAuxEps), grad_scores);
    out.grad_logits.row(t) = router_scores_backward<T>(config, routing.logits.row(t), scores, grad_scores);
  }
  return out;
}

template <typename T>
RouterLoss<T> z_loss(const MoeConfig& config, const Matrix<T>& logits, const std::vector<bool>& padding_mask,
                     const std::vector<std::vector<int>>& partition) {
  RouterLoss<T> out;
  out.grad_logits = Matrix<T>::Zero(logits.rows(), logits.cols());
  // The weight coeff/n of each valid row: n = the call's valid tokens, or with z-loss-local-mean P·n_p, the
  // part's valid tokens times the number of parts (each rank's coeff/|tp_cp| · local mean).
  std::vector<double> n(static_cast<size_t>(logits.rows()), 0.0);
  const auto count_valid = [&](const std::vector<int>& rows) {
    double valid = 0;
    for (int t : rows) valid += is_valid(padding_mask, t);
    return valid;
  };
  if (config.semantics.has(Deviation::z_loss_local_mean) && !partition.empty()) {
    for (const auto& part : partition) {
      const double weight = static_cast<double>(partition.size()) * count_valid(part);
      for (int t : part) n[static_cast<size_t>(t)] = weight;
    }
  } else {
    std::vector<int> all(static_cast<size_t>(logits.rows()));
    std::iota(all.begin(), all.end(), 0);
    std::fill(n.begin(), n.end(), count_valid(all));
  }
  for (Eigen::Index t = 0; t < logits.rows(); ++t) {
    if (!is_valid(padding_mask, t)) continue;
    const T scale = static_cast<T>(config.z_loss_coeff / n[static_cast<size_t>(t)]);
    const RowVector<T> l = logits.row(t);
    const T lse = logsumexp<T>(l);
    out.value += scale * lse * lse;
    out.grad_logits.row(t) = T(2) * scale * lse * softmax<T>(l);  // d lse / dl = softmax(l)
  }
  return out;
}

template RowVector<double> aux_scores<double>(const MoeConfig&, const RowVector<double>&);
template RowVector<float> aux_scores<float>(const MoeConfig&, const RowVector<float>&);
template AuxLoss<double> aux_loss<double>(const MoeConfig&, const Routing<double>&, const MoeInputs<double>&);
template AuxLoss<float> aux_loss<float>(const MoeConfig&, const Routing<float>&, const MoeInputs<float>&);
template RouterLoss<double> z_loss<double>(const MoeConfig&, const Matrix<double>&, const std::vector<bool>&,
                                           const std::vector<std::vector<int>>&);
template RouterLoss<float> z_loss<float>(const MoeConfig&, const Matrix<float>&, const std::vector<bool>&,
                                         const std::vector<std::vector<int>>&);

}  // namespace moe
