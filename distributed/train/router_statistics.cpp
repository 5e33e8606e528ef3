#include "distributed/train/router_statistics.hpp"

#include "distributed/comm/row_collectives.hpp"
#include "distributed/train/local_router.hpp"

#include <algorithm>
#include <numeric>

namespace moe::dist {
namespace {

constexpr double kAuxEps = 1e-20;

bool valid(const LocalTokens& tokens, Eigen::Index t) {
  return tokens.padding_mask.empty() || !tokens.padding_mask[static_cast<size_t>(t)];
}

// Number of statistic units (sequences for seq_aux, else one) and the unit of each row.
int unit_of(const MoeConfig& c, const LocalTokens& tokens, Eigen::Index t) {
  return c.aux_loss_type == AuxLossType::seq_aux ? tokens.sequence[static_cast<size_t>(t)] : 0;
}

}  // namespace

template <typename T>
RouterLossShare<T> aux_loss_share(const MoeConfig& c, const Matrix<T>& logits, const Matrix<T>& scores,
                                  const LocalTokens& tokens, const StatisticGroups& groups, GlobalAuxCounts& global) {
  const Eigen::Index n = scores.rows();
  const int E = c.num_experts;
  const int units = c.aux_loss_type == AuxLossType::seq_aux ? tokens.batch : 1;

  // s' and its top-k map.
  Matrix<T> normalised = scores;
  if (c.score_function != ScoreFunction::softmax)
    normalised.array().colwise() /= (scores.array().rowwise().sum() + static_cast<T>(kAuxEps));
  Matrix<double> counts = Matrix<double>::Zero(units, E);  // aux-map counts per statistic unit
  Vector<double> unit_tokens = Vector<double>::Zero(units);
  std::vector<int> order(static_cast<size_t>(E));
  for (Eigen::Index t = 0; t < n; ++t) {
    if (!valid(tokens, t)) continue;
    std::iota(order.begin(), order.end(), 0);
    const T* row = normalised.row(t).data();
    std::partial_sort(order.begin(), order.begin() + c.topk, order.end(),
                      [row](int a, int b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
    const int u = unit_of(c, tokens, t);
    for (int j = 0; j < c.topk; ++j) counts(u, order[static_cast<size_t>(j)]) += 1;
    unit_tokens(u) += 1;
  }

  // Reduce over the statistic's group: tp_cp, or tp_dp_cp for global_aux (then accumulate over steps).
  Communicator& group = c.aux_loss_type == AuxLossType::global_aux ? *groups.tp_dp_cp : *groups.tp_cp;
  group.allreduce<double>(span_of(counts), ReduceOp::sum);
  group.allreduce<double>(span_of(unit_tokens), ReduceOp::sum);
  if (c.aux_loss_type == AuxLossType::global_aux) {
    if (global.sum.empty()) global.sum.assign(static_cast<size_t>(E), 0.0);
    for (int e = 0; e < E; ++e) global.sum[static_cast<size_t>(e)] += counts(0, e);
    global.steps += 1;
    for (int e = 0; e < E; ++e) counts(0, e) = global.sum[static_cast<size_t>(e)] / global.steps;
  }

  // coeff·E/(k·T_u²)·c_{u,e}, weighted 1/batch for the mean over sequences: d value / d s'. Under
  // seq-aux-mean-length (Megatron) every sequence's T_u is the mean of the sequences' valid lengths.
  if (c.semantics.has(Deviation::seq_aux_mean_length)) unit_tokens.setConstant(unit_tokens.mean());
  Matrix<double> weight(units, E);
  for (int u = 0; u < units; ++u) {
    const double t_u = unit_tokens(u);
    const double scale = t_u > 0 ? c.aux_loss_coeff * E / (c.topk * t_u * t_u) / units : 0.0;
    weight.row(u) = scale * counts.row(u);
  }
  RouterLossShare<T> share;
  Matrix<T> grad_normalised = Matrix<T>::Zero(n, E);
  for (Eigen::Index t = 0; t < n; ++t) {
    if (!valid(tokens, t)) continue;
    grad_normalised.row(t) = weight.row(unit_of(c, tokens, t)).template cast<T>();
    share.value += grad_normalised.row(t).dot(normalised.row(t));
  }

  Matrix<T> grad_scores = grad_normalised;
  if (c.score_function != ScoreFunction::softmax) {
    const auto denom = (scores.array().rowwise().sum() + static_cast<T>(kAuxEps)).eval();
    const auto dot = (grad_normalised.array() * scores.array()).rowwise().sum().eval();
    grad_scores = (grad_normalised.array().colwise() / denom).matrix();
    grad_scores.array().colwise() -= dot / (denom * denom);
  }
  share.grad_logits = score_backward(c.score_function, logits, scores, grad_scores);
  return share;
}

template <typename T>
RouterLossShare<T> z_loss_share(const MoeConfig& c, const Matrix<T>& logits, const LocalTokens& tokens,
                                Communicator& tp_cp) {
  const Eigen::Index n = logits.rows();
  double valid_tokens = 0;
  for (Eigen::Index t = 0; t < n; ++t) valid_tokens += valid(tokens, t);
  // The mean's denominator: the microbatch's valid tokens (over tp_cp), or with z-loss-local-mean (Megatron) this
  // rank's own times |tp_cp| (coeff/|tp_cp| · local mean).
  if (c.semantics.has(Deviation::z_loss_local_mean)) {
    valid_tokens *= tp_cp.size();
  } else {
    tp_cp.allreduce<double>(std::span<double>(&valid_tokens, 1), ReduceOp::sum);
  }

  RouterLossShare<T> share;
  share.grad_logits = Matrix<T>::Zero(n, logits.cols());
  if (valid_tokens == 0) return share;
  const T scale = static_cast<T>(c.z_loss_coeff / valid_tokens);
  const Vector<T> max = logits.rowwise().maxCoeff();
  const Matrix<T> e = (logits.colwise() - max).array().exp().matrix();
  const Vector<T> sum = e.rowwise().sum();
  for (Eigen::Index t = 0; t < n; ++t) {
    if (!valid(tokens, t)) continue;
    const T lse = max(t) + std::log(sum(t));
    share.value += scale * lse * lse;
    share.grad_logits.row(t) = (T(2) * scale * lse / sum(t)) * e.row(t);  // d lse / dl = softmax
  }
  return share;
}

template RouterLossShare<double> aux_loss_share<double>(const MoeConfig&, const Matrix<double>&, const Matrix<double>&,
                                                        const LocalTokens&, const StatisticGroups&, GlobalAuxCounts&);
template RouterLossShare<float> aux_loss_share<float>(const MoeConfig&, const Matrix<float>&, const Matrix<float>&,
                                                      const LocalTokens&, const StatisticGroups&, GlobalAuxCounts&);
template RouterLossShare<double> z_loss_share<double>(const MoeConfig&, const Matrix<double>&, const LocalTokens&,
                                                      Communicator&);
template RouterLossShare<float> z_loss_share<float>(const MoeConfig&, const Matrix<float>&, const LocalTokens&,
                                                    Communicator&);

}  // namespace moe::dist
