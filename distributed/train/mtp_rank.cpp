#include "distributed/train/mtp_rank.hpp"

#include "distributed/train/dense_ops.hpp"
#include "reference/bf16.hpp"

#include <type_traits>

namespace moe::dist {

template <typename T>
MtpDepthRank<T>::MtpDepthRank(const ModelConfig& config, int block, const MtpShard<T>& shard,
                              const RankGroups& comms, const StepOptions& options, RolledRows rows, int batch, int seq)
    : config_(config),
      block_(block),
      shard_(shard),
      comms_(comms),
      options_(options),
      rows_(std::move(rows)),
      batch_(batch),
      seq_(seq) {}

template <typename T>
Matrix<T> MtpDepthRank<T>::forward(const Matrix<T>& previous, const Matrix<T>& embedding, const Matrix<T>& head,
                                   double ce_weight, double aux_weight, double z_weight, GlobalAuxCounts& global_aux,
                                   double& objective_share) {
  const double eps = config_.rms_eps;
  const bool bf16 = config_.layer.bf16_storage;
  const Eigen::Index n = rows_.ids.size(), h = embedding.cols();
  aux_weight_ = aux_weight;
  z_weight_ = z_weight;
  previous_ = previous;
  e_.resize(n, h);
  for (Eigen::Index r = 0; r < n; ++r) e_.row(r) = embedding.row(rows_.ids(r));
  both_.resize(n, 2 * h);
  both_ << stored(bf16, rms_norm_rows<T>(e_, shard_.own.enorm, eps)),
      stored(bf16, rms_norm_rows<T>(previous, shard_.own.hnorm, eps));
  u_ = stored(bf16, Matrix<T>(both_ * shard_.own.eh_proj.transpose()));

  mid_ = u_;
  if (config_.has_attention()) {
    if constexpr (std::is_same_v<T, double>) {
      attention_ = std::make_unique<AttentionRank>(config_.attention_config(), shard_.attention, comms_,
                                                   options_.kv_exchange, batch_, seq_);
      mid_ = stored(bf16, Matrix<T>(mid_ + attention_->forward(stored(bf16, rms_norm_rows<T>(u_, shard_.attention_norm,
                                                                                                eps)))));
    }
  }
  const bool counts_padding = config_.semantics().has(Deviation::router_counts_padding);
  const std::vector<bool> router_padding = counts_padding ? std::vector<bool>() : rows_.padded;
  layer_ = std::make_unique<MoeLayerRank<T>>(config_.layer_config(block_), shard_.layer, comms_, options_.dispatcher,
                                             *options_.kernels, replication_of(options_, block_),
                                             options_.expert_waves);
  out_ = stored(bf16, Matrix<T>(mid_ + layer_->forward(stored(bf16, rms_norm_rows<T>(mid_, shard_.block_norm, eps)),
                                                       RouterInputs{rows_.ids, router_padding},
                                                       LocalTokens{router_padding, rows_.sequence, batch_},
                                                       global_aux)));
  objective_share += aux_weight * static_cast<double>(layer_->aux_share()) +
                     z_weight * static_cast<double>(layer_->z_share());
  normed_ = stored(bf16, rms_norm_rows<T>(out_, shard_.own.final_norm, eps));
  CrossEntropy<T> ce =
      cross_entropy<T>(stored(bf16, Matrix<T>(normed_ * head.transpose())), rows_.labels, rows_.padded, ce_weight);
  objective_share += ce_weight * ce.sum;
  grad_logits_ = stored(bf16, std::move(ce.grad_logits));
  return normed_;
}

template <typename T>
Matrix<T> MtpDepthRank<T>::backward(const Matrix<T>& grad_normed, const Matrix<T>& embedding, const Matrix<T>& head,
                                    MtpShard<T>& g, Matrix<T>& grad_embedding, Matrix<T>& grad_head) {
  const double eps = config_.rms_eps;
  const bool bf16 = config_.layer.bf16_storage;
  const Eigen::Index h = embedding.cols();
  grad_head += grad_logits_.transpose() * normed_;
  const Matrix<T> grad_out = stored(bf16, rms_norm_rows_backward<T>(out_, shard_.own.final_norm, eps,
                                                                    grad_normed + grad_logits_ * head,
                                                                    g.own.final_norm));
  const Matrix<T> dx = layer_->backward(grad_out, static_cast<T>(aux_weight_), static_cast<T>(z_weight_), g.layer);
  Matrix<T> grad_u = stored(bf16, Matrix<T>(grad_out + rms_norm_rows_backward<T>(mid_, shard_.block_norm, eps, dx,
                                                                                 g.block_norm)));
  if (config_.has_attention()) {
    if constexpr (std::is_same_v<T, double>) {
      const Matrix<T> da = attention_->backward(grad_u, g.attention);
      grad_u += rms_norm_rows_backward<T>(u_, shard_.attention_norm, eps, da, g.attention_norm);
      grad_u = stored(bf16, std::move(grad_u));
    }
  }
  g.own.eh_proj += grad_u.transpose() * both_;
  const Matrix<T> grad_both = stored(bf16, Matrix<T>(grad_u * shard_.own.eh_proj));
  const Matrix<T> grad_e =
      stored(bf16, rms_norm_rows_backward<T>(e_, shard_.own.enorm, eps, grad_both.leftCols(h), g.own.enorm));
  for (Eigen::Index r = 0; r < grad_e.rows(); ++r) grad_embedding.row(rows_.ids(r)) += grad_e.row(r);
  return stored(bf16, rms_norm_rows_backward<T>(previous_, shard_.own.hnorm, eps, grad_both.rightCols(h),
                                                g.own.hnorm));
}

template class MtpDepthRank<double>;
template class MtpDepthRank<float>;

}  // namespace moe::dist
