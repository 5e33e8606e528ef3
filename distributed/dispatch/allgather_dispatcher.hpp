// The AllGather dispatcher (Megatron's MoEAllGatherTokenDispatcher): every rank of the tp_ep domain gathers all
// its peers' tokens, probabilities and routing maps, selects the rows of its own experts, and the combine
// reduce-scatters the (partial) outputs back to their owners. Simple and heavy: each rank receives every token.
#pragma once

#include "distributed/dispatch/dispatcher.hpp"

namespace moe::dist {

template <typename T>
class AllGatherDispatcher final : public Dispatcher<T> {
 public:
  AllGatherDispatcher(const DispatchGroups& groups, int num_experts, const KernelBackend& kernels);

  ExpertRows<T> dispatch(const Matrix<T>& tokens, const Matrix<T>& probs, const BoolMatrix& map) override;
  Matrix<T> combine(const Matrix<T>& expert_out) override;
  Matrix<T> combine_backward(const Matrix<T>& grad_y) override;
  void dispatch_backward(const Matrix<T>& grad_rows, const Vector<T>& grad_row_probs, Matrix<T>& grad_tokens,
                         Matrix<T>& grad_probs) override;

 private:
  Communicator& domain_;
  const KernelBackend& kernels_;
  int num_experts_ = 0, first_expert_ = 0, local_experts_ = 0;
  std::vector<std::int64_t> peer_tokens_;    // [tp_ep] tokens of each peer
  std::vector<std::int64_t> selected_rows_;  // gathered row of each expert row (local-expert-major)
  std::vector<int> selected_experts_;        // its global expert
};

}  // namespace moe::dist
