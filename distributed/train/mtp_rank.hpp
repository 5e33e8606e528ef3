// One multi-token-prediction depth (reference/model.hpp) on one rank of the last pipeline stage. Depth k works on
// the rank's own rows of the microbatch rolled left by k: every rank holds the whole batch, so it reads the id,
// label and mask of position s + k of each of its rows directly (where Megatron's roll_tensor exchanges the chunk
// boundaries between CP ranks). The previous depth's output stays on the same rows, so no activation moves:
//   uᵏ = [RMSNorm(embedding[id_{s+k}]; enorm), RMSNorm(fᵏ⁻¹; hnorm)]·eh_projᵀ     (eh_proj replicated, like the norms)
//   then the block (attention over TP/SP and CP, the MoE layer) and fᵏ = RMSNorm(·; final_norm), logits = fᵏ·headᵀ.
#pragma once

#include "distributed/train/attention_rank.hpp"
#include "distributed/train/model_shard.hpp"
#include "distributed/train/moe_layer_rank.hpp"
#include "distributed/train/train_step.hpp"

#include <memory>

namespace moe::dist {

// This rank's rows of the rolled microbatch.
struct RolledRows {
  IndexVector ids, labels;
  std::vector<bool> padded;  // true where position s + k is padding or past the sequence
  std::vector<int> sequence;
  double valid = 0;
};

template <typename T>
class MtpDepthRank {
 public:
  // `block`: the depth's global block index (num_layers + k − 1). batch and seq: the microbatch's.
  MtpDepthRank(const ModelConfig& config, int block, const MtpShard<T>& shard, const RankGroups& comms,
               const StepOptions& options, RolledRows rows, int batch, int seq);

  // fᵏ from fᵏ⁻¹ (this rank's rows); adds the weighted CE, aux and z shares to `objective_share`.
  Matrix<T> forward(const Matrix<T>& previous, const Matrix<T>& embedding, const Matrix<T>& head, double ce_weight,
                    double aux_weight, double z_weight, GlobalAuxCounts& global_aux, double& objective_share);
  // The gradient of fᵏ⁻¹ from the gradient of fᵏ coming from depth k + 1 (zero at the last depth); the depth's
  // gradients into `grads`, the embedding's and the head's into theirs.
  Matrix<T> backward(const Matrix<T>& grad_normed, const Matrix<T>& embedding, const Matrix<T>& head,
                     MtpShard<T>& grads, Matrix<T>& grad_embedding, Matrix<T>& grad_head);

  const std::vector<std::int64_t>& assignments() const { return layer_->assignments(); }
  const RolledRows& rows() const { return rows_; }

 private:
  const ModelConfig& config_;
  int block_;
  const MtpShard<T>& shard_;
  const RankGroups& comms_;
  const StepOptions& options_;
  RolledRows rows_;
  int batch_ = 0, seq_ = 0;
  double aux_weight_ = 0, z_weight_ = 0;
  Matrix<T> e_, both_, u_, mid_, out_, normed_, grad_logits_, previous_;
  std::unique_ptr<AttentionRank> attention_;
  std::unique_ptr<MoeLayerRank<T>> layer_;
};

}  // namespace moe::dist
