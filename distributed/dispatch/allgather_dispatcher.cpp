#include "distributed/dispatch/allgather_dispatcher.hpp"

#include "distributed/comm/row_collectives.hpp"

namespace moe::dist {

template <typename T>
AllGatherDispatcher<T>::AllGatherDispatcher(const DispatchGroups& groups, int num_experts,
                                            const KernelBackend& kernels, std::int64_t fused_min_bytes)
    : domain_(*groups.tp_ep), kernels_(kernels), num_experts_(num_experts), fused_min_bytes_(fused_min_bytes) {
  local_experts_ = groups.experts_here(num_experts).count;
  first_expert_ = groups.experts_here(num_experts).first;
  for (int q = 0; q < groups.tp_ep->size(); ++q) peer_experts_.push_back(groups.experts_of_peer(num_experts, q));
}

template <typename T>
ExpertRows<T> AllGatherDispatcher<T>::dispatch(const Matrix<T>& tokens, const Matrix<T>& probs, const BoolMatrix& map) {
  peer_tokens_ = allgather_count(domain_, tokens.rows());
  tokens_ = tokens.rows();
  fused_ = total(peer_tokens_) * tokens.cols() * static_cast<std::int64_t>(sizeof(T)) >= fused_min_bytes_;
  Matrix<T> all_tokens;
  if (!fused_) all_tokens = allgatherv_rows(domain_, tokens, peer_tokens_);
  const Matrix<T> all_probs = allgatherv_rows(domain_, probs, peer_tokens_);
  const IndexMatrix all_map = allgatherv_rows(domain_, IndexMatrix(map.cast<std::int64_t>()), peer_tokens_);
  this->observe_counts("peer_tokens", peer_tokens_);

  ExpertRows<T> rows;
  selected_rows_.clear();
  selected_experts_.clear();
  for (int i = 0; i < local_experts_; ++i) {
    const int e = first_expert_ + i;
    std::int64_t count = 0;
    for (Eigen::Index t = 0; t < all_map.rows(); ++t)
      if (all_map(t, e)) {
        selected_rows_.push_back(t);
        selected_experts_.push_back(e);
        ++count;
      }
    rows.group_sizes.push_back(count);
  }
  rows.probs.resize(static_cast<Eigen::Index>(selected_rows_.size()));
  for (size_t j = 0; j < selected_rows_.size(); ++j)
    rows.probs(static_cast<Eigen::Index>(j)) = all_probs(selected_rows_[j], selected_experts_[j]);
  if (fused_) {
    plan_fused(map);
    rows.x = exchange_.to_experts(domain_, tokens);
    this->observe("allgather", rows.x);
    this->observe("allgather", all_probs);
    return rows;
  }
  this->observe("allgather", all_tokens);
  this->observe("allgather", all_probs);
  rows.x = kernels_.gather_rows(all_tokens, selected_rows_);
  return rows;
}

// The fused exchange's two sides. Sending: this rank's tokens that select any expert of peer q, rising. Receiving:
// the gathered rows selected here (peer after peer, rising, as the senders list them), each the group of its
// expert rows.
template <typename T>
void AllGatherDispatcher<T>::plan_fused(const BoolMatrix& map) {
  const auto peers = static_cast<size_t>(domain_.size());
  RowBlocks& to = exchange_.token_side;
  to = {std::vector<std::int64_t>(peers, 0), {}};
  for (size_t q = 0; q < peers; ++q)
    for (Eigen::Index t = 0; t < map.rows(); ++t)
      if (map.row(t).segment(peer_experts_[q].first, peer_experts_[q].count).any()) {
        to.rows.push_back(t);
        ++to.counts[q];
      }
  const ExpertRowsByToken held = expert_rows_by_token(selected_rows_, total(peer_tokens_));
  RowBlocks& from = exchange_.expert_side;
  from = {std::vector<std::int64_t>(peers, 0), {}, {0}};
  std::int64_t g = 0;
  for (size_t s = 0; s < peers; ++s)
    for (std::int64_t k = 0; k < peer_tokens_[s]; ++k, ++g) {
      const auto b = held.first[static_cast<size_t>(g)], e = held.first[static_cast<size_t>(g) + 1];
      if (b == e) continue;  // no expert here selected it
      from.rows.insert(from.rows.end(), held.rows.begin() + b, held.rows.begin() + e);
      from.starts.push_back(static_cast<std::int64_t>(from.rows.size()));
      ++from.counts[s];
    }
  exchange_.expert_rows = static_cast<std::int64_t>(selected_rows_.size());
}

// Fused: each token's expert rows on each rank, summed left to right (the scatter-add's order), added into the
// token at its owner in rank order (the reduce-scatter's).
template <typename T>
Matrix<T> AllGatherDispatcher<T>::sum_at_owners(const Matrix<T>& expert_rows) const {
  Matrix<T> y = exchange_.to_tokens(domain_, expert_rows, tokens_);
  this->observe("reduce_scatter", y);
  return y;
}

template <typename T>
Matrix<T> AllGatherDispatcher<T>::combine(const Matrix<T>& expert_out) {
  if (fused_) return sum_at_owners(expert_out);
  const Matrix<T> all = kernels_.scatter_add_rows(expert_out, selected_rows_, total(peer_tokens_));
  this->observe("scatter_add", all);
  return reduce_scatterv_rows(domain_, all, peer_tokens_);
}

template <typename T>
Matrix<T> AllGatherDispatcher<T>::combine_backward(const Matrix<T>& grad_y) {
  if (fused_) {
    Matrix<T> rows = exchange_.to_experts(domain_, grad_y);
    this->observe("allgather", rows);
    return rows;
  }
  const Matrix<T> all = allgatherv_rows(domain_, grad_y, peer_tokens_);
  this->observe("allgather", all);
  return kernels_.gather_rows(all, selected_rows_);
}

template <typename T>
void AllGatherDispatcher<T>::dispatch_backward(const Matrix<T>& grad_rows, const Vector<T>& grad_row_probs,
                                               Matrix<T>& grad_tokens, Matrix<T>& grad_probs) {
  if (fused_) {
    grad_tokens = sum_at_owners(grad_rows);
  } else {
    const Matrix<T> all = kernels_.scatter_add_rows(grad_rows, selected_rows_, total(peer_tokens_));
    this->observe("scatter_add", all);
    grad_tokens = reduce_scatterv_rows(domain_, all, peer_tokens_);
  }
  Matrix<T> all_probs = Matrix<T>::Zero(total(peer_tokens_), num_experts_);
  for (size_t j = 0; j < selected_rows_.size(); ++j)
    all_probs(selected_rows_[j], selected_experts_[j]) += grad_row_probs(static_cast<Eigen::Index>(j));
  this->observe("scatter_add", all_probs);
  grad_probs = reduce_scatterv_rows(domain_, all_probs, peer_tokens_);
}

template class AllGatherDispatcher<double>;
template class AllGatherDispatcher<float>;

}  // namespace moe::dist
