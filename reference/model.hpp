// The model around the MoE layer — what makes every parallel group mean something:
//
//   h⁰_t   = embedding[input_id_t]                               [T, h], row t = s·batch + b
//   mˡ     = hˡ + Attn_l(RMSNorm(hˡ; a_l))                        with attention (else mˡ = hˡ)
//   hˡ⁺¹   = mˡ + MoE_l(RMSNorm(mˡ; w_l))                         l = 0 … L−1 (hash routing for l < n_hash_layers)
//   logits = RMSNorm(hᴸ; w_f) · headᵀ                             [T, V]
//   CE_sum = Σ_{t : loss_mask} (logsumexp(logits_t) − logits_t[label_t])
//
// Multi-token prediction (DeepSeek-V3, Megatron-Core's MultiTokenPredictionBlock), D depths after the main model;
// depth k = 1 … D sees the microbatch rolled left by k (rolled_batch: the id, label and mask of position s + k at s,
// the last k positions id 0, label 0, masked), and with f⁰ = RMSNorm(hᴸ; w_f):
//   uᵏ = [RMSNorm(embedding[id_{s+k}]; enorm_k), RMSNorm(fᵏ⁻¹; hnorm_k)] · eh_proj_kᵀ     [T, 2h] · [2h, h]
//   fᵏ = RMSNorm(Block_{L+k−1}(uᵏ); final_norm_k)                 a block like the main ones, score-routed
//   CEᵏ_sum = Σ over the rolled mask of the CE of fᵏ·headᵀ against the rolled labels (the shared embedding, head)
// The MTP blocks are blocks L … L+D−1 of the block vectors, so their MoE layers count in aux and z like any other.
//
// One microbatch at a time. How microbatch losses combine into the global objective (per-token or Megatron's
// per-microbatch mean) is the global step's business (global_step.hpp); here the backward differentiates
//   L = w_ce·CE_sum + w_aux·Σ_l aux_l + w_z·Σ_l z_l
// with the weights the caller passes (per row where they differ between rows), plus Σ_k w_k·CEᵏ_sum with MTP.
#pragma once

#include "reference/attention.hpp"
#include "reference/moe_layer.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace moe {

struct ModelConfig {
  MoeConfig layer;        // every MoE layer's options (hash layers override routing, see layer_config)
  int num_layers = 1;
  int n_hash_layers = 0;  // the first n layers route by tid2eid (DeepSeek-V4: 3)
  int vocab = 0;
  double rms_eps = 1e-6;
  AttentionConfig attention{};  // heads = 0: no attention (blocks are RMSNorm → MoE only)
  int mtp_depth = 0;            // D (Megatron's --mtp-num-layers); 0: no multi-token prediction
  double mtp_loss_scale = 0.1;  // λ: depth k's CE enters J with λ/D times the main CE's normalisation

  // Blocks: the L main ones, then one per MTP depth (block L + k − 1 is depth k's).
  int num_blocks() const { return num_layers + mtp_depth; }
  // "layer3." for a main block, "mtp0." for depth 1's: the prefix of the block's tensor names.
  std::string block_prefix(int block) const;

  bool has_attention() const { return attention.heads > 0; }
  // The attention as the blocks compute it: `attention` with the model's bf16 storage.
  AttentionConfig attention_config() const {
    AttentionConfig a = attention;
    a.bf16 = layer.bf16_storage;
    return a;
  }
  // Throws std::invalid_argument naming the rule.
  void validate() const;
  const Semantics& semantics() const { return layer.semantics; }
  // The same model with only the deviations that take effect under `mode` (Semantics::in_mode).
  ModelConfig in_mode(LossMode mode) const;
  // Block l's MoE config: hash layers get hash_routing on and expert bias, its update and groups off (MTP blocks
  // are never hash layers).
  MoeConfig layer_config(int l) const;
};

// What an MTP depth has besides its block.
template <typename T>
struct MtpParams {
  Vector<T> enorm;       // [h] on the embedding of the token k ahead
  Vector<T> hnorm;       // [h] on the previous depth's output
  Matrix<T> eh_proj;     // [h, 2h]
  Vector<T> final_norm;  // [h] before the shared head
};

template <typename T>
struct ModelParams {
  Matrix<T> embedding;                // [V, h]
  std::vector<Vector<T>> block_norm;  // per block (L + D) × [h]
  std::vector<MoeParams<T>> layers;   // per block
  std::vector<Vector<T>> attention_norm;         // per block × [h], or empty without attention
  std::vector<AttentionWeights<T>> attention;    // per block, or empty without attention
  std::vector<MtpParams<T>> mtp;                 // D
  Vector<T> final_norm;               // [h]
  Matrix<T> head;                     // [V, h]
};

// One microbatch of token ids. Rows of every activation are t = s·batch + b.
struct TokenBatch {
  int seq = 0;
  int batch = 0;
  IndexMatrix input_ids;  // [batch, seq]
  IndexMatrix labels;     // [batch, seq]
  BoolMatrix loss_mask;   // [batch, seq], true = a real token that counts; false = padding (also the router's mask,
                          // unless the semantics have router-counts-padding)
  // The MoE layers' capacity partition (one part per source rank's local rows); empty = one part.
  std::vector<std::vector<int>> partition;

  int tokens() const { return seq * batch; }
  bool valid(Eigen::Index row) const { return loss_mask(row % batch, row / batch); }  // row t = s·batch + b
  std::int64_t valid_tokens() const;
  // The tokens the router counts as valid: valid_tokens(), or every token under router-counts-padding.
  std::int64_t router_tokens(const Semantics& semantics) const;
};

// The microbatch depth k sees: position s holds the id, label and mask of s + k (the last k: id 0, label 0, masked,
// as Megatron's roll_tensor fills them).
TokenBatch rolled_batch(const TokenBatch& batch, int k);

template <typename T>
struct MtpForward {
  TokenBatch batch;           // rolled_batch(·, k)
  Matrix<T> e, en, hn;        // embedding rows of the rolled ids, RMSNorm(e; enorm), RMSNorm(fᵏ⁻¹; hnorm)
  Matrix<T> u;                // the block's input
  Matrix<T> out, normed;      // the block's output, fᵏ
  Matrix<T> logits;           // [T, V]
  Vector<T> ce_rows;          // [T], 0 where the rolled mask is false
  T ce_sum = 0;
};

template <typename T>
struct ModelForward {
  std::vector<Matrix<T>> hidden;         // L + 1 residual streams, hidden[0] = embeddings
  // Per block (L main, then D MTP):
  std::vector<Matrix<T>> mid;            // with attention: the streams mˡ between attention and MoE
  std::vector<Matrix<T>> attention_in;   // with attention: the normed inputs of the attention
  std::vector<AttentionForward> attention;
  std::vector<MoeInputs<T>> layer_inputs;
  std::vector<MoeForward<T>> layers;
  Matrix<T> normed;                      // f⁰ = RMSNorm(hᴸ; w_f)
  Matrix<T> logits;                      // [T, V]
  Vector<T> ce_rows;                     // [T] CE of each row, 0 on padding
  T ce_sum = 0;
  T aux_sum = 0;                         // Σ_l aux_l (coefficients included)
  T z_sum = 0;
  std::vector<MtpForward<T>> mtp;        // D
};

struct ModelLossWeights {
  double ce = 1.0;
  double aux = 1.0;
  double z = 1.0;
  // Per-row weights replacing ce / aux (empty: uniform), where a semantics rule weights the rows of one source
  // rank differently (ce-per-cp-rank, per-token-aux-local-tokens).
  std::vector<double> ce_rows{};
  std::vector<double> aux_rows{};
  // Per MTP depth: the weight of its CE (empty: λ/D·ce each), or per row (empty: the depth's scalar).
  std::vector<double> mtp{};
  std::vector<std::vector<double>> mtp_rows{};
};

// global_aux: per-layer state before this microbatch (empty = fresh for every layer); global_aux_group: per-layer
// statistics of the whole group when it spans more than this microbatch (empty = this microbatch is the group).
template <typename T>
ModelForward<T> model_forward(const ModelConfig& config, const ModelParams<T>& params, const TokenBatch& batch,
                              const std::vector<GlobalAuxState>& global_aux = {},
                              const std::vector<GlobalAuxGroup>& global_aux_group = {});

// Gradients in the shape of the parameters (expert_bias and tid2eid of each block stay empty).
template <typename T>
ModelParams<T> model_backward(const ModelConfig& config, const ModelParams<T>& params, const TokenBatch& batch,
                              const ModelForward<T>& forward, const ModelLossWeights& weights);

// Every trained tensor of the model, in a fixed order with a stable name ("layer1.expert_fc1[3]"), as a view
// into `params`. The expert bias (updated by counts, not gradients) and tid2eid (a table) are not listed.
template <typename T>
struct TensorView {
  std::string name;
  T* data;
  Eigen::Index size;
  std::vector<Eigen::Index> shape;  // [rows, cols] of a matrix, [n] of a vector (what numpy calls the shape)
};
template <typename T>
std::vector<TensorView<T>> trained_tensors(const ModelConfig& config, ModelParams<T>& params);
// The weights a bf16 step computes with: its main parameters with every trained tensor rounded to bf16
// (reference/bf16.hpp), the copy a mixed-precision run makes of its fp32 main parameters before each forward. The
// step's gradients are for this copy; the optimizer applies them to the main parameters. The expert bias, which is
// not trained by gradients, keeps its value.
ModelParams<double> bf16_weights(const ModelConfig& config, ModelParams<double> main);

template <typename T>
ModelParams<T> random_model_params(const ModelConfig& config, std::uint64_t seed);

// Ids and labels uniform in [0, V); every token valid.
TokenBatch random_token_batch(const ModelConfig& config, int seq, int batch, std::uint64_t seed);

}  // namespace moe
