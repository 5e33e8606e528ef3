// The AllGather dispatcher (Megatron's MoEAllGatherTokenDispatcher): every rank of the tp_ep domain gathers all
// its peers' tokens, probabilities and routing maps, selects the rows of its own experts, and the combine
// reduce-scatters the (partial) outputs back to their owners. Simple and heavy: each rank receives every token.
//
// Above `fused_min_bytes` of gathered token rows, the gather and the selection are one exchange (alltoallv_indexed
// with RowBlocks groups): each rank reads, from its owner, every token one of its experts selected, straight into
// those experts' rows; and the combine sums a token's expert rows on each rank as its owner reads them, in rank
// order, without the scatter-add into every gathered token and the reduce-scatter. The probabilities and maps are
// still gathered. Both paths give the same bits; every rank takes the same one (the gathered size is the same
// everywhere).
#pragma once

#include "distributed/dispatch/dispatcher.hpp"
#include "distributed/dispatch/token_expert_exchange.hpp"

namespace moe::dist {

template <typename T>
class AllGatherDispatcher final : public Dispatcher<T> {
 public:
  static constexpr std::int64_t default_fused_min_bytes = std::int64_t{4} << 20;
  AllGatherDispatcher(const DispatchGroups& groups, int num_experts, const KernelBackend& kernels,
                      std::int64_t fused_min_bytes = default_fused_min_bytes);

  ExpertRows<T> dispatch(const Matrix<T>& tokens, const Matrix<T>& probs, const BoolMatrix& map) override;
  Matrix<T> combine(const Matrix<T>& expert_out) override;
  Matrix<T> combine_backward(const Matrix<T>& grad_y) override;
  void dispatch_backward(const Matrix<T>& grad_rows, const Vector<T>& grad_row_probs, Matrix<T>& grad_tokens,
                         Matrix<T>& grad_probs) override;

 private:
  void plan_fused(const BoolMatrix& map);
  Matrix<T> sum_at_owners(const Matrix<T>& expert_rows) const;

  Communicator& domain_;
  const KernelBackend& kernels_;
  int num_experts_ = 0, first_expert_ = 0, local_experts_ = 0;
  std::vector<std::int64_t> peer_tokens_;    // [tp_ep] tokens of each peer
  std::vector<std::int64_t> selected_rows_;  // gathered row of each expert row (local-expert-major)
  std::vector<int> selected_experts_;        // its global expert
  std::vector<ExpertRange> peer_experts_;    // per rank of the dispatch domain: its local experts
  std::int64_t fused_min_bytes_ = 0;
  bool fused_ = false;                       // this dispatch reads the selected rows from their owners
  Eigen::Index tokens_ = 0;                  // this rank's
  // Fused: this rank's tokens that each peer's experts selected, and each peer's tokens selected here, as the
  // groups of expert rows that hold them.
  TokenExpertExchange exchange_;
};

}  // namespace moe::dist
