// The Flex dispatcher (Megatron's MoEFlexTokenDispatcher, the shape DeepEP/HybridEP implement): one tp_ep
// domain; each selected expert is expanded to its physical destinations (every ETP shard of its EP rank), and a
// token is sent once per destination rank however many of that rank's experts it selected. The receiver
// permutes locally by expert, combines a token's local experts before returning one row, and the source sums
// the rows that come back. The token rows cross without a pack or an unpack (alltoallv_indexed reads them where
// they lie and adds the returning rows straight into their tokens).
//
// Above `fused_min_bytes` of received token rows, the local permute and combine are fused into the exchange too:
// a received token lands at once in each of its local experts' rows, and the rows going back are the sums of a
// token's expert rows, taken as they are read (RowBlocks groups). Below it, the local permute and combine are the
// kernel backend's gather and scatter-add around the exchange. Both give the same bits; the collectives are the
// same on both paths, so each rank may choose its own.
#pragma once

#include "distributed/dispatch/dispatcher.hpp"
#include "distributed/dispatch/token_expert_exchange.hpp"

namespace moe::dist {

template <typename T>
class FlexDispatcher final : public Dispatcher<T> {
 public:
  static constexpr std::int64_t default_fused_min_bytes = std::int64_t{4} << 20;
  FlexDispatcher(const DispatchGroups& groups, int num_experts, const KernelBackend& kernels,
                 std::int64_t fused_min_bytes = default_fused_min_bytes);

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
  // Back to the sources, added into their token rows: one row per received token, or (fused) a received token's
  // expert rows, summed as they are read.
  Matrix<T> sum_at_sources(const Matrix<T>& rows) const;

  Communicator& domain_;
  const KernelBackend& kernels_;
  int num_experts_ = 0, local_experts_ = 0;
  std::int64_t fused_min_bytes_ = 0;
  bool fused_ = false;                         // this dispatch fuses the local permute and combine
  std::vector<int> peer_first_expert_;         // per rank of the dispatch domain: its first local expert
  Eigen::Index tokens_ = 0, received_ = 0;
  std::vector<std::int64_t> sent_tokens_;      // source token of each sent row (destination-major)
  std::vector<int> sent_first_expert_;         // first global expert of that row's destination
  std::vector<std::int64_t> send_counts_, recv_counts_;  // rows per peer
  // The token rows sent to each peer (sent_tokens_), and where they land: one received row each, peer after peer,
  // or (fused) the group of expert rows that hold it.
  TokenExpertExchange exchange_;
  std::vector<std::int64_t> local_rows_;       // received row of each expert row (local-expert-major)
  std::vector<int> local_row_expert_;          // local expert of each expert row
};

}  // namespace moe::dist
