// The attention sublayer of a pre-norm block on one rank, under TP with sequence parallelism and CP:
//   forward   x (this rank's SP rows) ─all-gather over tp→ the CP rank's rows ─CP attention of this TP rank's heads→
//             a partial output (its heads' share of o·Woᵀ) ─reduce-scatter over tp→ this rank's SP rows of out
//   backward  the mirror: dout all-gathered over tp, the CP attention's backward on the local heads, and dx (each
//             TP rank's heads contribute to every row) reduce-scattered back to the SP rows.
// TP rank r holds heads [r·H/tp, (r+1)·H/tp) and key/value groups [r·G/tp, (r+1)·G/tp): wq, wk, wv split by rows,
// wo by columns (Megatron's column- and row-parallel linears), so a head keeps its group. The SP rows of the tp
// ranks, in tp order, are the CP rank's rows (reference/global_step.hpp's split), which is the order the CP layer
// expects. Weight gradients are this rank's share over dp and cp, as the gradient plan expects of dense params.
#pragma once

#include "distributed/train/cp_attention.hpp"
#include "distributed/train/rank_groups.hpp"

namespace moe::dist {

// The attention config of one TP rank (H/tp heads, G/tp groups); throws unless tp divides both.
AttentionConfig tp_attention_config(const AttentionConfig& config, int tp);
// TP rank r's slice of the weights.
AttentionWeights<double> tp_attention_slice(const AttentionConfig& config, const AttentionWeights<double>& global,
                                            int tp, int tp_rank);

class AttentionRank {
 public:
  // `weights`: this TP rank's slice; batch and seq of the microbatch (the CP rank holds seq/cp positions of each).
  AttentionRank(const AttentionConfig& config, const AttentionWeights<double>& weights, const RankGroups& comms,
                KvExchange exchange, int batch, int seq);

  Matrix<double> forward(const Matrix<double>& x);
  // dout: this rank's SP rows; returns dx of the same rows and adds the weight gradients into `grads`.
  Matrix<double> backward(const Matrix<double>& dout, AttentionWeights<double>& grads);

 private:
  AttentionConfig config_;  // of this TP rank's heads
  const AttentionWeights<double>& weights_;
  const RankGroups& comms_;
  KvExchange exchange_;
  int batch_ = 0, seq_ = 0;
  std::vector<std::int64_t> sp_rows_;  // rows of each tp rank
  Matrix<double> x_;                   // the CP rank's rows, gathered
  CpAttentionForward forward_;
};

}  // namespace moe::dist
