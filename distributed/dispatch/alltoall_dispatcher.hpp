// The AlltoAll dispatcher: EP alltoallv of token rows, ETP allgather, chunk sort by local expert (see the .cpp
// for the stages). Use through make_dispatcher (dispatcher.hpp).
#pragma once

#include "distributed/dispatch/dispatcher.hpp"

namespace moe::dist {

template <typename T>
class AlltoAllDispatcher final : public Dispatcher<T> {
 public:
  AlltoAllDispatcher(const DispatchGroups& groups, int num_experts, const KernelBackend& kernels);

  ExpertRows<T> dispatch(const Matrix<T>& tokens, const Matrix<T>& probs, const BoolMatrix& map) override;
  Matrix<T> combine(const Matrix<T>& expert_out) override;
  Matrix<T> combine_backward(const Matrix<T>& grad_y) override;
  void dispatch_backward(const Matrix<T>& grad_rows, const Vector<T>& grad_row_probs, Matrix<T>& grad_tokens,
                         Matrix<T>& grad_probs) override;

  // The splits of the last dispatch, in rows (what `moe-oracle step` shows).
  const std::vector<std::int64_t>& input_splits() const { return input_splits_; }
  const std::vector<std::int64_t>& output_splits() const { return output_splits_; }

 private:
  void preprocess(const BoolMatrix& map);
  template <typename M>
  M to_sources(const M& rows) const;

  DispatchGroups groups_;
  const KernelBackend& kernels_;
  int num_experts_ = 0, ep_ = 1, etp_ = 1, local_experts_ = 0;
  Eigen::Index tokens_ = 0;
  std::vector<std::int64_t> input_splits_;    // [ep] rows this rank sends to each EP peer
  std::vector<std::int64_t> output_splits_;   // [ep] rows it receives from each EP peer
  std::vector<std::int64_t> global_counts_;   // [etp, ep, L] rows per (ETP rank, EP source, local expert)
  std::vector<std::int64_t> gathered_rows_;   // [etp] rows each ETP rank contributes to the allgather
  std::vector<std::int64_t> group_sizes_;     // [L] rows per local expert
  std::vector<std::int64_t> sorted_rows_;     // the chunk sort as a row gather
  std::vector<std::int64_t> unsorted_rows_;   // and its inverse
  std::vector<std::int64_t> permuted_rows_;   // source token of each permuted row
  std::vector<int> permuted_experts_;         // its expert
};

}  // namespace moe::dist
