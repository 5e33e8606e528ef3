#include "distributed/dispatch/flex_dispatcher.hpp"

#include "distributed/comm/row_collectives.hpp"

#include <numeric>
#include <span>

namespace moe::dist {

template <typename T>
FlexDispatcher<T>::FlexDispatcher(const DispatchGroups& groups, int num_experts, const KernelBackend& kernels,
                                  std::int64_t fused_min_bytes)
    : domain_(*groups.tp_ep), kernels_(kernels), num_experts_(num_experts), fused_min_bytes_(fused_min_bytes) {
  local_experts_ = groups.experts_here(num_experts).count;
  for (int q = 0; q < groups.tp_ep->size(); ++q)
    peer_first_expert_.push_back(groups.experts_of_peer(num_experts, q).first);
}

template <typename T>
ExpertRows<T> FlexDispatcher<T>::dispatch(const Matrix<T>& tokens, const Matrix<T>& probs, const BoolMatrix& map) {
  const int peers = domain_.size(), L = local_experts_;
  tokens_ = tokens.rows();
  // Destination q holds L experts from peer_first_expert_[q]; a token goes there once if it selected any.
  sent_tokens_.clear();
  sent_first_expert_.clear();
  send_counts_.assign(static_cast<size_t>(peers), 0);
  for (int q = 0; q < peers; ++q) {
    const int first = peer_first_expert_[static_cast<size_t>(q)];
    for (Eigen::Index t = 0; t < tokens_; ++t)
      if (map.row(t).segment(first, L).any()) {
        sent_tokens_.push_back(t);
        sent_first_expert_.push_back(first);
        ++send_counts_[static_cast<size_t>(q)];
      }
  }
  const auto rows = static_cast<Eigen::Index>(sent_tokens_.size());
  Matrix<T> send_probs(rows, L);
  IndexMatrix send_map(rows, L);
  for (Eigen::Index j = 0; j < rows; ++j) {
    const auto t = sent_tokens_[static_cast<size_t>(j)];
    const int first = sent_first_expert_[static_cast<size_t>(j)];
    send_probs.row(j) = probs.row(t).segment(first, L);
    send_map.row(j) = map.row(t).segment(first, L).template cast<std::int64_t>();
  }

  recv_counts_.assign(static_cast<size_t>(peers), 0);
  domain_.alltoallv<std::int64_t>(send_counts_, std::vector<std::int64_t>(static_cast<size_t>(peers), 1), recv_counts_,
                                  std::vector<std::int64_t>(static_cast<size_t>(peers), 1));
  this->observe_counts("send_counts", send_counts_);
  this->observe_counts("recv_counts", recv_counts_);
  this->observe("permute", send_probs);
  // The probabilities and expert map first: the fused path needs the local permute before the token rows move.
  const Matrix<T> p = alltoallv_rows(domain_, send_probs, send_counts_, recv_counts_);
  const IndexMatrix m = alltoallv_rows(domain_, send_map, send_counts_, recv_counts_);
  received_ = m.rows();

  // Local permute: received rows duplicated per selected local expert, expert-major.
  ExpertRows<T> out;
  local_rows_.clear();
  local_row_expert_.clear();
  std::vector<T> row_probs;
  for (int i = 0; i < L; ++i) {
    std::int64_t count = 0;
    for (Eigen::Index j = 0; j < received_; ++j)
      if (m(j, i)) {
        local_rows_.push_back(j);
        local_row_expert_.push_back(i);
        row_probs.push_back(p(j, i));
        ++count;
      }
    out.group_sizes.push_back(count);
  }
  out.probs = Eigen::Map<const Vector<T>>(row_probs.data(), static_cast<Eigen::Index>(row_probs.size()));

  // The token rows are read where they lie (no pack): destination-major, as sent_tokens_ lists them.
  exchange_.token_side = {send_counts_, sent_tokens_};
  fused_ = received_ * tokens.cols() * static_cast<std::int64_t>(sizeof(T)) >= fused_min_bytes_;
  if (fused_) {
    ExpertRowsByToken held = expert_rows_by_token(local_rows_, received_);
    exchange_.expert_side = {recv_counts_, std::move(held.rows), std::move(held.first)};
    exchange_.expert_rows = static_cast<std::int64_t>(local_rows_.size());
  } else {
    exchange_.expert_side = {recv_counts_, std::vector<std::int64_t>(static_cast<size_t>(received_))};
    std::iota(exchange_.expert_side.rows.begin(), exchange_.expert_side.rows.end(), std::int64_t{0});
    exchange_.expert_rows = received_;
  }
  Matrix<T> x = exchange_.to_experts(domain_, tokens);
  this->observe("alltoallv", x);
  this->observe("alltoallv", p);
  if (fused_) {
    out.x = std::move(x);
  } else {
    out.x = kernels_.gather_rows(x, local_rows_);
  }
  return out;
}

template <typename T>
template <typename M>
M FlexDispatcher<T>::return_to_sources(const M& received) const {
  return alltoallv_rows(domain_, received, recv_counts_, send_counts_);
}

template <typename T>
Matrix<T> FlexDispatcher<T>::combine(const Matrix<T>& expert_out) {
  if (fused_) return sum_at_sources(expert_out);
  // One row per received token: the sum over its local experts, then back to the source.
  const Matrix<T> per_token = kernels_.scatter_add_rows(expert_out, local_rows_, received_);
  this->observe("combine_local", per_token);
  return sum_at_sources(per_token);
}

// Each row (or group, summed left to right: scatter_add_rows' order over a token's expert rows) added straight
// into its token row in sent order: scatter_add_rows' sum at the source, without the unpack.
template <typename T>
Matrix<T> FlexDispatcher<T>::sum_at_sources(const Matrix<T>& rows) const {
  Matrix<T> y = exchange_.to_tokens(domain_, rows, tokens_);
  this->observe("alltoallv_back", y);
  return y;
}

template <typename T>
Matrix<T> FlexDispatcher<T>::combine_backward(const Matrix<T>& grad_y) {
  Matrix<T> rows = exchange_.to_experts(domain_, grad_y);
  this->observe("alltoallv", rows);
  if (fused_) return rows;
  return kernels_.gather_rows(rows, local_rows_);
}

template <typename T>
void FlexDispatcher<T>::dispatch_backward(const Matrix<T>& grad_rows, const Vector<T>& grad_row_probs,
                                          Matrix<T>& grad_tokens, Matrix<T>& grad_probs) {
  const int L = local_experts_;
  Matrix<T> per_token;
  if (!fused_) per_token = kernels_.scatter_add_rows(grad_rows, local_rows_, received_);
  // The probability gradient of expert row r belongs to (its received row, its local expert).
  Matrix<T> per_token_probs = Matrix<T>::Zero(received_, L);
  for (size_t r = 0; r < local_rows_.size(); ++r)
    per_token_probs(local_rows_[r], local_row_expert_[r]) += grad_row_probs(static_cast<Eigen::Index>(r));
  if (!fused_) this->observe("combine_local", per_token);
  this->observe("combine_local", per_token_probs);
  grad_tokens = sum_at_sources(fused_ ? grad_rows : per_token);
  const Matrix<T> back_probs = return_to_sources(per_token_probs);
  this->observe("alltoallv_back", back_probs);
  grad_probs = Matrix<T>::Zero(tokens_, num_experts_);
  for (size_t j = 0; j < sent_tokens_.size(); ++j)
    grad_probs.row(sent_tokens_[j]).segment(sent_first_expert_[j], L) += back_probs.row(static_cast<Eigen::Index>(j));
}

template class FlexDispatcher<double>;
template class FlexDispatcher<float>;

}  // namespace moe::dist
