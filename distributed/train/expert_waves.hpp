// Wave-scheduled EP (DeepSeek-V4 §3.1 and its MegaMoE kernel; seed 002 "Wave-Scheduled EP"): the experts of a layer
// run in W waves, and the dispatch of one wave, the compute of the next and the combine of the one before overlap.
// Wave w holds local experts [⌊w·L/W⌋, ⌊(w+1)·L/W⌋) of every EP rank, so every rank computes in every wave. Each
// wave is one use of the AlltoAll dispatcher on the routing map with the other waves' experts cleared.
//
//   the rank (comm):  D0 │ D1  ·   │ D2  C0 │ D3  C1 │ …  C(W−1)     D w: dispatch wave w's rows to their experts
//   worker thread:       │ X0      │ X1     │ X2     │               X w: wave w's SwiGLU
//                                                                   C w: wave w's outputs back to their sources
// The backward runs the same schedule with D = dL/dy rows to the experts, X = the SwiGLU backward (and wgrad) and
// C = dL/d rows back. The worker never communicates, so the communicator needs no thread support (MPI: FUNNELED).
//
// Bitwise the unwaved layer: each expert sees exactly its unwaved rows, in the same order. The combine keeps every
// (token, expert) row apart until the last wave is back and then sums each token's rows in the unwaved order
// (expert-major, the AlltoAll unpermute): summing per wave and then over waves would round differently (MegaMoE
// fixes its reduction order across waves for the same reason). Only the AlltoAll dispatcher returns every row to its
// source; Flex and AllGather add rows up on the expert side before the return, and are refused.
#pragma once

#include "distributed/dispatch/alltoall_dispatcher.hpp"
#include "distributed/kernels/kernel_backend.hpp"

#include <memory>
#include <vector>

namespace moe::dist {

// One step of the rank's program. launch starts wave w's compute on the worker; wait blocks until it has finished.
enum class WaveOp { dispatch, launch, wait, combine };
struct WaveStep {
  WaveOp op;
  int wave;
};
// The program for W waves: D0, then per wave w: launch X w, D w+1, C w−1, wait X w; finally C W−1. Every combine
// comes after the wait of its own wave, and the compute of wave w runs while wave w+1 is dispatched and wave w−1
// combined.
std::vector<WaveStep> wave_schedule(int waves);

// When each stage of each wave ran, in microseconds from the start of the pass (what `moe-oracle step` shows).
enum class WaveStage { dispatch, compute, combine };
struct WaveSpan {
  int wave = 0;
  WaveStage stage = WaveStage::dispatch;
  double begin_us = 0, end_us = 0;
  bool on_worker = false;  // ran on the worker thread, not on the rank's own
};
using WaveTimeline = std::vector<WaveSpan>;

class WaveWorker;  // the thread that runs the computes (expert_waves.cpp)

// The wave of local expert i of L in W waves.
int wave_of_local_expert(int i, int local_experts, int waves);

// One (layer, microbatch) use on one rank, collective over the dispatch groups like a dispatcher.
template <typename T>
class ExpertWaves {
 public:
  // Throws std::invalid_argument unless 2 ≤ waves ≤ the local experts of a rank (every wave needs an expert on
  // every rank).
  ExpertWaves(int waves, const DispatchGroups& groups, int num_experts, const KernelBackend& kernels,
              const kernels::SwigluOptions& options);
  ~ExpertWaves();

  // u [n, w] this rank's tokens, probs and map [n, E]: the routed output [n, w], each token's expert outputs summed.
  Matrix<T> forward(const Matrix<T>& u, const Matrix<T>& probs, const BoolMatrix& map,
                    const kernels::ExpertShards<T>& experts);
  // dL/d output [n, w] → dL/du [n, w] and dL/d probs [n, E]; adds the local experts' wgrad into grads.
  void backward(const Matrix<T>& grad_out, const kernels::ExpertShards<T>& experts, kernels::ExpertShards<T>& grads,
                Matrix<T>& grad_u, Matrix<T>& grad_probs);

  int waves() const { return int(waves_.size()); }
  // Rows of wave w at this rank's experts (dispatched to it) and back at this rank as a source (its tokens' rows).
  Eigen::Index expert_rows(int w) const { return waves_[static_cast<size_t>(w)].rows.x.rows(); }
  Eigen::Index source_rows(int w) const { return waves_[static_cast<size_t>(w)].back.rows(); }
  const WaveTimeline& forward_timeline() const { return forward_timeline_; }
  const WaveTimeline& backward_timeline() const { return backward_timeline_; }

 private:
  struct Wave {
    std::unique_ptr<AlltoAllDispatcher<T>> dispatcher;
    ExpertRows<T> rows;
    Matrix<T> pre, out, back;                      // forward: pre-activations, expert outputs, rows back home
    Matrix<T> grad_rows;                           // backward: dL/d out at the experts
    kernels::GroupedSwigluBackward<T> grad;        // dL/d rows and row probs at the experts
    Matrix<T> back_grad, back_grad_probs;          // and back home
  };
  // Rows of every wave, back home, in the unwaved permuted order.
  Matrix<T> merged(Matrix<T> Wave::*rows) const;

  DispatchGroups groups_;
  int num_experts_, local_experts_;
  const KernelBackend& kernels_;
  kernels::SwigluOptions options_;
  std::vector<Wave> waves_;
  Eigen::Index tokens_ = 0;
  // The unwaved permuted order: per row, its wave and its row in that wave's order; its token and expert.
  std::vector<std::pair<int, Eigen::Index>> order_;
  RowIndex order_tokens_;
  std::vector<int> order_experts_;
  WaveTimeline forward_timeline_, backward_timeline_;
  std::unique_ptr<WaveWorker> worker_;  // from the forward to the end of the backward
};

}  // namespace moe::dist
