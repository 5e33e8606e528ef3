#include "distributed/dispatch/allgather_dispatcher.hpp"

#include "distributed/comm/row_collectives.hpp"

namespace moe::dist {

template <typename T>
AllGatherDispatcher<T>::AllGatherDispatcher(const DispatchGroups& groups, int num_experts,
             const KernelBackend& kernels)
    : domain_(*groups.tp_ep), kernels_(kernels), num_experts_(num_experts) {
  local_experts_ = groups.experts_here(num_experts).count;
  first_expert_ = groups.experts_here(num_experts).first;
}

template <typename T>
ExpertRows<T> AllGatherDispatcher<T>::dispatch(const Matrix<T>& tokens, const Matrix<T>& probs, const BoolMatrix& map) {
  peer_tokens_ = allgather_count(domain_, tokens.rows());
  const Matrix<T> all_tokens = allgatherv_rows(domain_, tokens, peer_tokens_);
  const Matrix<T> all_probs = allgatherv_rows(domain_, probs, peer_tokens_);
  const IndexMatrix all_map = allgatherv_rows(domain_, IndexMatrix(map.cast<std::int64_t>()), peer_tokens_);
  this->observe_counts("peer_tokens", peer_tokens_);
  this->observe("allgather", all_tokens);
  this->observe("allgather", all_probs);

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
  rows.x = kernels_.gather_rows(all_tokens, selected_rows_);
  rows.probs.resize(static_cast<Eigen::Index>(selected_rows_.size()));
  for (size_t j = 0; j < selected_rows_.size(); ++j)
    rows.probs(static_cast<Eigen::Index>(j)) = all_probs(selected_rows_[j], selected_experts_[j]);
  return rows;
}

template <typename T>
Matrix<T> AllGatherDispatcher<T>::combine(const Matrix<T>& expert_out) {
  const Matrix<T> all = kernels_.scatter_add_rows(expert_out, selected_rows_, total(peer_tokens_));
  this->observe("scatter_add", all);
  return reduce_scatterv_rows(domain_, all, peer_tokens_);
}

template <typename T>
Matrix<T> AllGatherDispatcher<T>::combine_backward(const Matrix<T>& grad_y) {
  const Matrix<T> all = allgatherv_rows(domain_, grad_y, peer_tokens_);
  this->observe("allgather", all);
  return kernels_.gather_rows(all, selected_rows_);
}

template <typename T>
void AllGatherDispatcher<T>::dispatch_backward(const Matrix<T>& grad_rows, const Vector<T>& grad_row_probs,
                                               Matrix<T>& grad_tokens, Matrix<T>& grad_probs) {
  const Matrix<T> all = kernels_.scatter_add_rows(grad_rows, selected_rows_, total(peer_tokens_));
  this->observe("scatter_add", all);
  grad_tokens = reduce_scatterv_rows(domain_, all, peer_tokens_);
  Matrix<T> all_probs = Matrix<T>::Zero(total(peer_tokens_), num_experts_);
  for (size_t j = 0; j < selected_rows_.size(); ++j)
    all_probs(selected_rows_[j], selected_experts_[j]) += grad_row_probs(static_cast<Eigen::Index>(j));
  this->observe("scatter_add", all_probs);
  grad_probs = reduce_scatterv_rows(domain_, all_probs, peer_tokens_);
}

template class AllGatherDispatcher<double>;
template class AllGatherDispatcher<float>;

}  // namespace moe::dist
