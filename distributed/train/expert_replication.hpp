// Replicated hot experts (HybridEP's virtual experts, seed 000 "虚拟专家"): a hot logical expert gets temporary
// execution slots on other EP ranks for one step. Its owner keeps the only trainable copy; a replica receives the
// owner's weights and a share of the expert's rows, computes them, returns the outputs, and in the backward returns
// the input gradients and its wgrad, which the owner adds to its own before the data-parallel reduction. The
// model does not change: top-k, the logical experts and the parameters are the unreplicated run's.
//
//   owner, after dispatch:  rows of expert e (n of them) → part 0 kept, part j → replica j   (contiguous, in order)
//   forward:   weights and part j → replica j;  replica: SwiGLU(part j) → owner;  owner puts every part in place
//   backward:  d_out of part j → replica j;  replica: dx, dprob, wgrad_j → owner;  owner: wgrad_e += Σ_j wgrad_j
//
// Part j of p parts of n rows is [⌊n·j/p⌋, ⌊n·(j+1)/p⌋). The planner (plan_replicas) is deterministic: every rank
// computes the same plan from the same counts (the previous step's, or any counts a caller gives). ETP 1 and no FP8
// dispatch, as HybridEP requires (seed 000: "当前路径有 ETP1 … 等配置要求").
#pragma once

#include "distributed/comm/communicator.hpp"
#include "distributed/dispatch/dispatcher.hpp"
#include "distributed/kernels/kernel_backend.hpp"

#include <cstdint>
#include <vector>

namespace moe::dist {

struct ReplicationPlan {
  // Per logical expert: the EP ranks that compute a share of its rows besides its owner, in part order (part j + 1
  // on replicas[e][j]). Empty for an expert that is not replicated; empty altogether for no replication.
  std::vector<std::vector<int>> replicas;

  bool empty() const;
  int slots() const;  // replica slots in use
};

// At most `slots` replica slots over `ep` ranks, E = counts.size() experts, ep rank r owning experts
// [r·E/ep, (r+1)·E/ep). Greedy: while slots remain, take the most loaded rank, give the expert of which it computes
// the largest part (as owner or replica) one more copy on the least loaded rank that holds none of it, and keep it
// if that lowers the rank's load without raising the maximum; ties go to the lowest rank and expert. Loads count
// rows as the parts split them.
ReplicationPlan plan_replicas(const std::vector<std::int64_t>& counts, int ep, int slots);

// Rows of part j of `parts` of n rows: [begin, end).
struct RowRange {
  std::int64_t begin = 0, end = 0;
};
RowRange part_of(std::int64_t n, int parts, int j);

// One (layer, microbatch) use on one rank: computes the owner's kept rows here and the replicated parts on their
// replicas (collective over ep: every rank of the group calls forward and backward together).
template <typename T>
class ExpertReplicas {
 public:
  ExpertReplicas(const ReplicationPlan& plan, Communicator& ep, int num_experts, const KernelBackend& kernels,
                 const kernels::SwigluOptions& options);

  // rows: this rank's dispatched rows, grouped by local expert. Returns the expert outputs [R, w] in row order.
  Matrix<T> forward(const ExpertRows<T>& rows, const kernels::ExpertShards<T>& weights);
  // d_out [R, w] → dx [R, w] and dprob [R]; adds every copy's wgrad into grads (this rank's local experts).
  kernels::GroupedSwigluBackward<T> backward(const Matrix<T>& d_out, const kernels::ExpertShards<T>& weights,
                                             kernels::ExpertShards<T>& grads);

 private:
  // A replicated part this rank sends (as owner) or computes (as replica).
  struct Part {
    int expert = 0;  // global id
    int peer = 0;    // the replica (sent) or the owner (computed)
    RowRange rows;   // in the owner's dispatched rows (sent parts only)
  };
  const ReplicationPlan& plan_;
  Communicator& ep_;
  int num_experts_, first_expert_, local_experts_;  // this rank's experts: reference/process_groups local_experts
  const KernelBackend& kernels_;
  kernels::SwigluOptions options_;

  // Owner side: the kept rows (indices into the dispatched rows, grouped by local expert) with what their backward
  // needs, and the parts sent, in peer order, then plan order, with the positions of their rows.
  RowIndex kept_, kept_sizes_;
  Matrix<T> kept_x_, kept_pre_;
  Vector<T> kept_probs_;
  std::vector<Part> sent_;
  std::vector<std::int64_t> sent_rows_per_peer_;
  RowIndex sent_positions_;
  // Replica side: the parts computed here, in peer order, with their rows, probs, weights and pre-activations.
  std::vector<Part> computed_;
  std::vector<std::int64_t> computed_rows_per_peer_;
  RowIndex computed_sizes_;
  Matrix<T> foreign_x_, foreign_pre_;
  Vector<T> foreign_probs_;
  kernels::ExpertShards<T> foreign_weights_;
};

}  // namespace moe::dist
