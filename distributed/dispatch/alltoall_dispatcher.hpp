// The AlltoAll dispatcher: EP alltoallv of token rows, ETP allgather, chunk sort by local expert (see the .cpp
// for the stages). Use through make_dispatcher (dispatcher.hpp).
#pragma once

#include "distributed/dispatch/dispatcher.hpp"

namespace moe::dist {

template <typename T>
class AlltoAllDispatcher final : public Dispatcher<T> {
 public:
  // Above `direct_min_bytes` of routed rows in the whole dispatch domain (and without ETP), each way is one
  // alltoallv_indexed (comm/row_exchange.hpp): rows are read where their tokens lie, land in their sorted place,
  // and come back added straight into their token rows, so nothing is packed, sorted or unpacked. Below it, an
  // alltoallv of the permuted rows and a sort gather, the path ETP always takes. Both give the same bits.
  static constexpr std::int64_t default_direct_min_bytes = std::int64_t{4} << 20;
  AlltoAllDispatcher(const DispatchGroups& groups, int num_experts, const KernelBackend& kernels,
                     std::int64_t direct_min_bytes = default_direct_min_bytes);

  ExpertRows<T> dispatch(const Matrix<T>& tokens, const Matrix<T>& probs, const BoolMatrix& map) override;
  Matrix<T> combine(const Matrix<T>& expert_out) override;
  Matrix<T> combine_backward(const Matrix<T>& grad_y) override;
  void dispatch_backward(const Matrix<T>& grad_rows, const Vector<T>& grad_row_probs, Matrix<T>& grad_tokens,
                         Matrix<T>& grad_probs) override;

  // The per-row forms, for wave scheduling (train/expert_waves.hpp): the rows back at this source in the permuted
  // order (expert-major, tokens rising within an expert), before the unpermute sums each token's rows.
  Matrix<T> return_rows(const Matrix<T>& expert_out) const { return to_sources(expert_out); }
  void return_grad_rows(const Matrix<T>& grad_rows, const Vector<T>& grad_row_probs, Matrix<T>& rows,
                        Matrix<T>& row_probs) const;
  // The source token and the expert of each permuted row.
  const std::vector<std::int64_t>& permuted_rows() const { return permuted_rows_; }
  const std::vector<int>& permuted_experts() const { return permuted_experts_; }

  // The splits of the last dispatch, in rows (what `moe-oracle step` shows).
  const std::vector<std::int64_t>& input_splits() const { return input_splits_; }
  const std::vector<std::int64_t>& output_splits() const { return output_splits_; }

 private:
  void preprocess(const BoolMatrix& map, Eigen::Index width);
  template <typename M>
  M to_sources(const M& rows) const;
  // The direct exchange (etp = 1): one alltoallv_indexed over ep between two of the sides below; `recv_rows`
  // is the receive matrix's height when rows are added (the tokens).
  void plan_direct();
  template <typename M>
  Matrix<T> exchange(const M& from, const RowBlocks& send, const RowBlocks& recv, RowLanding landing,
                     Eigen::Index recv_rows = 0) const;

  DispatchGroups groups_;
  const KernelBackend& kernels_;
  int num_experts_ = 0, ep_ = 1, etp_ = 1, local_experts_ = 0;
  Eigen::Index tokens_ = 0;
  std::vector<std::int64_t> input_splits_;    // [ep] rows this rank sends to each EP peer
  std::vector<std::int64_t> output_splits_;   // [ep] rows it receives from each EP peer
  std::vector<std::int64_t> global_counts_;   // [etp, ep, L] rows per (ETP rank, EP source, local expert)
  std::vector<std::int64_t> gathered_rows_;   // [etp] rows each ETP rank contributes to the allgather
  std::vector<std::int64_t> group_sizes_;     // [L] rows per local expert
  std::vector<std::int64_t> sorted_rows_;     // the chunk sort as a row gather (not direct)
  std::vector<std::int64_t> unsorted_rows_;   // and its inverse
  std::vector<std::int64_t> chunk_start_;     // [etp, ep, L] where each chunk lands in the sorted order (direct)
  std::int64_t direct_min_bytes_ = 0;
  std::int64_t domain_rows_ = 0;              // routed rows of the whole dispatch domain (equal on its ranks)
  bool direct_ = false;                       // this use exchanges directly into the sorted order
  RowBlocks token_side_;                      // direct: the token rows each EP peer gets, in permuted order
  RowBlocks permuted_side_;                   // direct: the same as rows of a permuted-order matrix
  RowBlocks expert_side_;                     // direct: where each source's rows sit in the sorted order
  std::vector<std::int64_t> permuted_rows_;   // source token of each permuted row
  std::vector<int> permuted_experts_;         // its expert
};

// The unpermute of the gradients: dL/d tokens [tokens, w] sums each token's rows in row order; dL/d probs
// [tokens, E] takes each row's probability gradient at (its token, its expert).
template <typename T>
void unpermute_grads(const KernelBackend& kernels, const Matrix<T>& rows, const Matrix<T>& row_probs,
                     const std::vector<std::int64_t>& row_tokens, const std::vector<int>& row_experts,
                     Eigen::Index tokens, int num_experts, Matrix<T>& grad_tokens, Matrix<T>& grad_probs);

}  // namespace moe::dist
