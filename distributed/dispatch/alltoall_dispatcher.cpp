// The AlltoAll dispatcher (Megatron's MoEAlltoAllTokenDispatcher), stage by stage:
//   1 preprocess   local counts [E] → input_splits [ep]; counts gathered over tp_ep → [etp, ep, L]
//                  (tokens each EP source sends to each local expert, per ETP rank) → output_splits [ep]
//   2 permute      token rows expert-major (tokens ascending within an expert), duplicated per selection
//   3 EP alltoallv tokens and probs
//   4 ETP allgather, then sort chunks (etp, ep, local expert) → (local expert, etp, ep)
//   — experts —
//   5 undo the sort, ETP reduce-scatter (sums the shards' partial outputs)
//   6 EP alltoallv back (swapped splits)
//   7 unpermute: scatter-add each token's rows (probabilities were applied inside the experts)
// The backward runs the same communication in reverse (alltoallv ↔ alltoallv, allgather ↔ reduce-scatter).
// Direct exchange (no ETP, large batches): stages 2–4 are one alltoallv_indexed that reads each row where its token
// lies and lands it in its sorted place, and 5–7 one that adds each row straight into its token row (in permuted
// order, as the unpermute would), so every row crosses once and is never packed or unpacked.
#include "distributed/dispatch/alltoall_dispatcher.hpp"

#include "distributed/comm/row_collectives.hpp"
#include "distributed/kernels/token_kernels.hpp"

#include <numeric>

namespace moe::dist {

template <typename T>
AlltoAllDispatcher<T>::AlltoAllDispatcher(const DispatchGroups& groups, int num_experts,
            const KernelBackend& kernels, std::int64_t direct_min_bytes)
    : groups_(groups), kernels_(kernels), num_experts_(num_experts), direct_min_bytes_(direct_min_bytes) {
  ep_ = groups.ep->size();
  etp_ = groups.expt_tp->size();
  local_experts_ = groups.experts_here(num_experts).count;
}

template <typename T>
void AlltoAllDispatcher<T>::preprocess(const BoolMatrix& map, Eigen::Index width) {
  const int E = num_experts_, L = local_experts_;
  std::vector<std::int64_t> local_counts(static_cast<size_t>(E), 0);  // [E] rows this rank sends to each expert
  for (int e = 0; e < E; ++e) local_counts[static_cast<size_t>(e)] = map.col(e).count();

  input_splits_.assign(static_cast<size_t>(ep_), 0);
  for (int e = 0; e < E; ++e)
    input_splits_[static_cast<size_t>(groups_.owner_of(e, E))] += local_counts[static_cast<size_t>(e)];

  // Every tp_ep rank's counts: rank q = etp' + etp·ep' contributes row q.
  std::vector<std::int64_t> all(static_cast<size_t>(ep_ * etp_ * E));
  groups_.tp_ep->allgather<std::int64_t>(local_counts, all);
  domain_rows_ = total(all);
  const int first = groups_.experts_here(E).first;
  global_counts_.assign(static_cast<size_t>(etp_ * ep_ * L), 0);  // [etp', ep', i]
  for (int et = 0; et < etp_; ++et)
    for (int ep = 0; ep < ep_; ++ep)
      for (int i = 0; i < L; ++i)
        global_counts_[static_cast<size_t>((et * ep_ + ep) * L + i)] =
            all[static_cast<size_t>((et + etp_ * ep) * E + first + i)];

  const int my_etp = groups_.expt_tp->rank();
  output_splits_.assign(static_cast<size_t>(ep_), 0);
  gathered_rows_.assign(static_cast<size_t>(etp_), 0);
  group_sizes_.assign(static_cast<size_t>(L), 0);
  for (int et = 0; et < etp_; ++et)
    for (int ep = 0; ep < ep_; ++ep)
      for (int i = 0; i < L; ++i) {
        const auto c = global_counts_[static_cast<size_t>((et * ep_ + ep) * L + i)];
        if (et == my_etp) output_splits_[static_cast<size_t>(ep)] += c;
        gathered_rows_[static_cast<size_t>(et)] += c;
        group_sizes_[static_cast<size_t>(i)] += c;
      }

  // Chunks arrive as (etp', ep', i); the experts want (i, etp', ep').
  std::vector<std::int64_t> order;
  for (int i = 0; i < L; ++i)
    for (int c = 0; c < etp_ * ep_; ++c) order.push_back(c * L + i);
  // Every rank of the domain sees the same domain_rows_ and width, so all take the same path. The direct exchange
  // needs where each chunk lands; the other path the sort as a row gather and its inverse, so that undoing the sort
  // is one gather rather than zero-fill plus scatter.
  direct_ = etp_ == 1 && domain_rows_ * width * static_cast<std::int64_t>(sizeof(T)) >= direct_min_bytes_;
  if (direct_) {
    chunk_start_.assign(global_counts_.size(), 0);
    std::int64_t at = 0;
    for (const auto c : order) {
      chunk_start_[static_cast<size_t>(c)] = at;
      at += global_counts_[static_cast<size_t>(c)];
    }
  } else {
    sorted_rows_ = kernels::sort_chunks_rows(global_counts_, order);
    unsorted_rows_.assign(sorted_rows_.size(), 0);
    for (size_t j = 0; j < sorted_rows_.size(); ++j)
      unsorted_rows_[static_cast<size_t>(sorted_rows_[j])] = static_cast<std::int64_t>(j);
  }
  this->observe_counts("tokens_per_expert", local_counts);
  this->observe_counts("input_splits", input_splits_);
  this->observe_counts("global_counts", global_counts_);
  this->observe_counts("output_splits", output_splits_);
}

template <typename T>
ExpertRows<T> AlltoAllDispatcher<T>::dispatch(const Matrix<T>& tokens, const Matrix<T>& probs, const BoolMatrix& map) {
  tokens_ = tokens.rows();
  preprocess(map, tokens.cols());

  permuted_rows_.clear();
  permuted_experts_.clear();
  for (int e = 0; e < num_experts_; ++e)
    for (Eigen::Index t = 0; t < tokens.rows(); ++t)
      if (map(t, e)) {
        permuted_rows_.push_back(t);
        permuted_experts_.push_back(e);
      }
  Vector<T> permuted_probs(static_cast<Eigen::Index>(permuted_rows_.size()));
  for (size_t j = 0; j < permuted_rows_.size(); ++j)
    permuted_probs(static_cast<Eigen::Index>(j)) = probs(permuted_rows_[j], permuted_experts_[j]);

  if (direct_) {
    plan_direct();
    Matrix<T> x = exchange(tokens, token_side_, expert_side_, RowLanding::copy);
    Matrix<T> p = exchange(Matrix<T>(permuted_probs), permuted_side_, expert_side_, RowLanding::copy);
    this->observe("ep_alltoallv", x);
    this->observe("ep_alltoallv", p);
    return {std::move(x), Vector<T>(p), group_sizes_};
  }
  const Matrix<T> permuted = kernels_.gather_rows(tokens, permuted_rows_);
  this->observe("permute", permuted);
  this->observe("permute", permuted_probs);
  Matrix<T> x = alltoallv_rows(*groups_.ep, permuted, input_splits_, output_splits_);
  Vector<T> p = alltoallv_rows(*groups_.ep, permuted_probs, input_splits_, output_splits_);
  this->observe("ep_alltoallv", x);
  this->observe("ep_alltoallv", p);
  if (etp_ > 1) {
    x = allgatherv_rows(*groups_.expt_tp, x, gathered_rows_);
    p = allgatherv_rows(*groups_.expt_tp, p, gathered_rows_);
    this->observe("etp_allgather", x);
    this->observe("etp_allgather", p);
  }
  return {kernels_.gather_rows(x, sorted_rows_), kernels_.gather_rows(Matrix<T>(p), sorted_rows_), group_sizes_};
}

// The three sides of the direct exchange. Peer d's experts are a contiguous range, so in the source's expert-major
// (permuted) order the rows for peer d are one block, and in the expert owner's sorted order the rows from source
// d for local expert i are chunk (d, i).
template <typename T>
void AlltoAllDispatcher<T>::plan_direct() {
  token_side_ = {input_splits_, permuted_rows_};
  permuted_side_ = {input_splits_, std::vector<std::int64_t>(permuted_rows_.size())};
  std::iota(permuted_side_.rows.begin(), permuted_side_.rows.end(), std::int64_t{0});
  expert_side_ = {output_splits_, {}};
  for (int d = 0; d < ep_; ++d)
    for (int i = 0; i < local_experts_; ++i) {
      const auto c = static_cast<size_t>(d * local_experts_ + i);  // chunk (etp 0, source d, expert i)
      for (std::int64_t k = 0; k < global_counts_[c]; ++k) expert_side_.rows.push_back(chunk_start_[c] + k);
    }
}

template <typename T>
template <typename M>
Matrix<T> AlltoAllDispatcher<T>::exchange(const M& from, const RowBlocks& send, const RowBlocks& recv,
                                          RowLanding landing, Eigen::Index recv_rows) const {
  const Eigen::Index w = from.cols();
  Matrix<T> to = landing == RowLanding::add ? Matrix<T>::Zero(recv_rows, w)
                                            : Matrix<T>(static_cast<Eigen::Index>(recv.rows.size()), w);
  groups_.ep->alltoallv_indexed<T>(const_span_of(from), send, span_of(to), recv, w, landing);
  return to;
}

template <typename T>
template <typename M>
M AlltoAllDispatcher<T>::to_sources(const M& rows) const {
  if (direct_) {
    M back = exchange(rows, expert_side_, permuted_side_, RowLanding::copy);
    this->observe("ep_alltoallv_back", back);
    return back;
  }
  // Undo the chunk sort, sum the ETP shards' partials, send each block back to its EP source.
  M unsorted = kernels_.gather_rows(rows, unsorted_rows_);
  this->observe("unsort_chunks", unsorted);
  if (etp_ > 1) {
    unsorted = reduce_scatterv_rows(*groups_.expt_tp, unsorted, gathered_rows_);
    this->observe("etp_reduce_scatter", unsorted);
  }
  M back = alltoallv_rows(*groups_.ep, unsorted, output_splits_, input_splits_);
  this->observe("ep_alltoallv_back", back);
  return back;
}

template <typename T>
Matrix<T> AlltoAllDispatcher<T>::combine(const Matrix<T>& expert_out) {
  if (direct_) {  // out = 0; out[token of row j] += row j, j rising: scatter_add_rows' sum, fused into the receive
    Matrix<T> y = exchange(expert_out, expert_side_, token_side_, RowLanding::add, tokens_);
    this->observe("ep_alltoallv_back", y);
    return y;
  }
  const Matrix<T> back = to_sources(expert_out);
  return kernels_.scatter_add_rows(back, permuted_rows_, tokens_);
}

template <typename T>
Matrix<T> AlltoAllDispatcher<T>::combine_backward(const Matrix<T>& grad_y) {
  if (direct_) {
    Matrix<T> rows = exchange(grad_y, token_side_, expert_side_, RowLanding::copy);
    this->observe("ep_alltoallv", rows);
    return rows;
  }
  const Matrix<T> send = kernels_.gather_rows(grad_y, permuted_rows_);
  this->observe("permute", send);
  Matrix<T> rows = alltoallv_rows(*groups_.ep, send, input_splits_, output_splits_);
  this->observe("ep_alltoallv", rows);
  if (etp_ > 1) {
    rows = allgatherv_rows(*groups_.expt_tp, rows, gathered_rows_);
    this->observe("etp_allgather", rows);
  }
  return kernels_.gather_rows(rows, sorted_rows_);
}

template <typename T>
void AlltoAllDispatcher<T>::return_grad_rows(const Matrix<T>& grad_rows, const Vector<T>& grad_row_probs,
                                             Matrix<T>& rows, Matrix<T>& row_probs) const {
  rows = to_sources(grad_rows);
  row_probs = to_sources(Matrix<T>(grad_row_probs));
}

template <typename T>
void AlltoAllDispatcher<T>::dispatch_backward(const Matrix<T>& grad_rows, const Vector<T>& grad_row_probs,
                                              Matrix<T>& grad_tokens, Matrix<T>& grad_probs) {
  if (direct_) {  // dL/d tokens summed in the receive, as in combine
    grad_tokens = exchange(grad_rows, expert_side_, token_side_, RowLanding::add, tokens_);
    const Matrix<T> back_probs = to_sources(Matrix<T>(grad_row_probs));
    grad_probs = Matrix<T>::Zero(tokens_, num_experts_);
    for (size_t j = 0; j < permuted_rows_.size(); ++j)
      grad_probs(permuted_rows_[j], permuted_experts_[j]) += back_probs(static_cast<Eigen::Index>(j), 0);
    return;
  }
  Matrix<T> back, back_probs;
  return_grad_rows(grad_rows, grad_row_probs, back, back_probs);
  unpermute_grads(kernels_, back, back_probs, permuted_rows_, permuted_experts_, tokens_, num_experts_, grad_tokens,
                  grad_probs);
}

template <typename T>
void unpermute_grads(const KernelBackend& kernels, const Matrix<T>& rows, const Matrix<T>& row_probs,
                     const std::vector<std::int64_t>& row_tokens, const std::vector<int>& row_experts,
                     Eigen::Index tokens, int num_experts, Matrix<T>& grad_tokens, Matrix<T>& grad_probs) {
  grad_tokens = kernels.scatter_add_rows(rows, row_tokens, tokens);
  grad_probs = Matrix<T>::Zero(tokens, num_experts);
  for (size_t j = 0; j < row_tokens.size(); ++j)
    grad_probs(row_tokens[j], row_experts[j]) += row_probs(static_cast<Eigen::Index>(j), 0);
}

template class AlltoAllDispatcher<double>;
template class AlltoAllDispatcher<float>;
template void unpermute_grads<double>(const KernelBackend&, const Matrix<double>&, const Matrix<double>&,
                                      const std::vector<std::int64_t>&, const std::vector<int>&, Eigen::Index, int,
                                      Matrix<double>&, Matrix<double>&);
template void unpermute_grads<float>(const KernelBackend&, const Matrix<float>&, const Matrix<float>&,
                                     const std::vector<std::int64_t>&, const std::vector<int>&, Eigen::Index, int,
                                     Matrix<float>&, Matrix<float>&);

}  // namespace moe::dist
