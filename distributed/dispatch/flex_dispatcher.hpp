// The Flex dispatcher (Megatron's MoEFlexTokenDispatcher, the shape DeepEP/HybridEP implement): one tp_ep
// domain; each selected expert is expanded to its physical destinations (every ETP shard of its EP rank), and a
// token is sent once per destination rank however many of that rank's experts it selected. The receiver
// permutes locally by expert, combines a token's local experts before returning one row, and the source sums
// the rows that come back. The token rows cross without a pack or an unpack (alltoallv_indexed reads them where
// they lie and adds the returning rows straight into their tokens); the local permute and combine remain.
#pragma once

#include "distributed/dispatch/dispatcher.hpp"

namespace moe::dist {

template <typename T>
class FlexDispatcher final : public Dispatcher<T> {
 public:
  FlexDispatcher(const DispatchGroups& groups, int num_experts, const KernelBackend& kernels);

  ExpertRows<T> dispatch(const Matrix<T>& tokens, const Matrix<T>& probs, const BoolMatrix& map) override;
  Matrix<T> combine(const Matrix<T>& expert_out) override;
  Matrix<T> combine_backward(const Matrix<T>& grad_y) override;
  void dispatch_backward(const Matrix<T>& grad_rows, const Vector<T>& grad_row_probs, Matrix<T>& grad_tokens,
                         Matrix<T>& grad_probs) override;

  // Rows sent to each destination in the last dispatch (de-duplicated per token).
  const std::vector<std::int64_t>& send_rows() const { return send_counts_; }

 private:
  template <typename M>
  M return_to_sources(const M& received) const;
  Matrix<T> sum_at_sources(const Matrix<T>& per_token) const;

  Communicator& domain_;
  const KernelBackend& kernels_;
  int num_experts_ = 0, local_experts_ = 0;
  std::vector<int> peer_first_expert_;         // per rank of the dispatch domain: its first local expert
  Eigen::Index tokens_ = 0, received_ = 0;
  std::vector<std::int64_t> sent_tokens_;      // source token of each sent row (destination-major)
  std::vector<int> sent_first_expert_;         // first global expert of that row's destination
  std::vector<std::int64_t> send_counts_, recv_counts_;  // rows per peer
  RowBlocks token_side_;                       // the token rows sent to each peer (sent_tokens_)
  RowBlocks received_side_;                    // the received rows, peer after peer
  std::vector<std::int64_t> local_rows_;       // received row of each expert row (local-expert-major)
  std::vector<int> local_row_expert_;          // local expert of each expert row
};

}  // namespace moe::dist
