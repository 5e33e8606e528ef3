// A token dispatcher moves each rank's routed token rows to the ranks holding their experts and brings the
// expert outputs back (docs/architecture.md; Megatron-Core's transformer/moe/token_dispatcher.py). Three exist:
// AlltoAll, AllGather, Flex. Each call of dispatch starts one use (one layer, one microbatch): the object keeps the
// metadata (splits, row orders) that combine and the two backward passes reuse, so create one per use.
//
//   forward:   rows = dispatch(tokens, probs, map);  out = experts(rows);  y = combine(out)
//   backward:  d_out = combine_backward(dy);  (d_rows, d_row_probs) = experts'(d_out);
//              (d_tokens, d_probs) = dispatch_backward(d_rows, d_row_probs)
// The expert rows are grouped by local expert (group_sizes). With ETP each rank computes a partial output over
// its shard; combine sums the partials, and dispatch_backward sums the partial input gradients.
#pragma once

#include "distributed/comm/communicator.hpp"
#include "distributed/dispatch/stage_observer.hpp"
#include "distributed/kernels/kernel_backend.hpp"
#include "reference/config.hpp"
#include "reference/named.hpp"
#include "reference/process_groups.hpp"
#include "reference/tensor.hpp"

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

namespace moe::dist {

enum class DispatcherKind { alltoall, allgather, flex };
inline constexpr Named<DispatcherKind> kDispatcherNames[] = {
    {DispatcherKind::alltoall, "alltoall"}, {DispatcherKind::allgather, "allgather"}, {DispatcherKind::flex, "flex"}};
constexpr std::span<const Named<DispatcherKind>> names_of(DispatcherKind) { return kDispatcherNames; }
inline std::string_view to_string(DispatcherKind kind) { return name_of(kind); }

template <typename T>
struct ExpertRows {
  Matrix<T> x;                             // [R, w] grouped by local expert
  Vector<T> probs;                         // [R]
  std::vector<std::int64_t> group_sizes;   // [local experts]
};

// set_observer (stage_observer.hpp) lets `moe-oracle step` watch the stages; unset, it costs nothing.
template <typename T>
class Dispatcher : public ObservedStages<T> {
 public:
  virtual ~Dispatcher() = default;
  // tokens [n, w], probs and map [n, E] of this rank's local tokens.
  virtual ExpertRows<T> dispatch(const Matrix<T>& tokens, const Matrix<T>& probs, const BoolMatrix& map) = 0;
  // expert outputs [R, w] (partial over ETP) → [n, w], the sum over each token's experts.
  virtual Matrix<T> combine(const Matrix<T>& expert_out) = 0;
  // dL/dy [n, w] → dL/d expert_out [R, w] (full rows on every ETP shard).
  virtual Matrix<T> combine_backward(const Matrix<T>& grad_y) = 0;
  // dL/d rows [R, w] and dL/d row probs [R] (partial over ETP) → dL/d tokens [n, w] and dL/d probs [n, E].
  virtual void dispatch_backward(const Matrix<T>& grad_rows, const Vector<T>& grad_row_probs, Matrix<T>& grad_tokens,
                                 Matrix<T>& grad_probs) = 0;
};

// The groups a dispatcher uses, as this rank sees them, and the expert placement they imply. Placement is defined
// once, by reference/process_groups.hpp's local_experts (ep rank r holds experts [r·E/ep, (r+1)·E/ep), the same on
// every ETP shard), and every dispatcher asks these methods rather than working it out from group sizes.
struct DispatchGroups {
  Communicator* ep = nullptr;       // expert parallel
  Communicator* expt_tp = nullptr;  // expert tensor parallel (ETP)
  Communicator* tp_ep = nullptr;    // the whole dispatch domain: rank = etp_rank + etp·ep_rank

  ExpertRange experts_here(int num_experts) const;                   // this rank's local experts
  ExpertRange experts_of_peer(int num_experts, int tp_ep_rank) const;  // those of a rank of the dispatch domain
  int owner_of(int expert, int num_experts) const;                   // the ep rank holding an expert
};

// The dispatcher moves rows with `kernels` (kept by reference: it must outlive the dispatcher).
template <typename T>
std::unique_ptr<Dispatcher<T>> make_dispatcher(DispatcherKind kind, const DispatchGroups& groups, int num_experts,
                                               const KernelBackend& kernels = cpu_kernels());

}  // namespace moe::dist
