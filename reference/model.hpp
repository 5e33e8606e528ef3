// The model around the MoE layer — what makes every parallel group mean something:
//
//   h⁰_t   = embedding[input_id_t]                               [T, h], row t = s·batch + b
//   mˡ     = hˡ + Attn_l(RMSNorm(hˡ; a_l))                        with attention (else mˡ = hˡ)
//   hˡ⁺¹   = mˡ + MoE_l(RMSNorm(mˡ; w_l))                         l = 0 … L−1 (hash routing for l < n_hash_layers)
//   logits = RMSNorm(hᴸ; w_f) · headᵀ                             [T, V]
//   CE_sum = Σ_{t : loss_mask} (logsumexp(logits_t) − logits_t[label_t])
//
// One microbatch at a time. How microbatch losses combine into the global objective (per-token or Megatron's
// per-microbatch mean) is the global step's business (global_step.hpp); here the backward differentiates
//   L = w_ce·CE_sum + w_aux·Σ_l aux_l + w_z·Σ_l z_l
// with the weights the caller passes (per row where they differ between rows).
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

  bool has_attention() const { return attention.heads > 0; }
  // Throws std::invalid_argument naming the rule.
  void validate() const;
  const Semantics& semantics() const { return layer.semantics; }
  // The same model with only the deviations that take effect under `mode` (Semantics::in_mode).
  ModelConfig in_mode(LossMode mode) const;
  // Layer l's config: hash layers get hash_routing on and expert bias, its update and groups off.
  MoeConfig layer_config(int l) const;
};

template <typename T>
struct ModelParams {
  Matrix<T> embedding;                // [V, h]
  std::vector<Vector<T>> block_norm;  // L × [h]
  std::vector<MoeParams<T>> layers;   // L
  std::vector<Vector<T>> attention_norm;         // L × [h], or empty without attention
  std::vector<AttentionWeights<T>> attention;    // L, or empty without attention
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
  std::int64_t valid_tokens() const;
  // The tokens the router counts as valid: valid_tokens(), or every token under router-counts-padding.
  std::int64_t router_tokens(const Semantics& semantics) const;
};

template <typename T>
struct ModelForward {
  std::vector<Matrix<T>> hidden;         // L + 1 residual streams, hidden[0] = embeddings
  std::vector<Matrix<T>> mid;            // with attention: L streams mˡ between attention and MoE
  std::vector<Matrix<T>> attention_in;   // with attention: L normed inputs of the attention
  std::vector<AttentionForward> attention;
  std::vector<MoeInputs<T>> layer_inputs;
  std::vector<MoeForward<T>> layers;
  Matrix<T> logits;                      // [T, V]
  Vector<T> ce_rows;                     // [T] CE of each row, 0 on padding
  T ce_sum = 0;
  T aux_sum = 0;                         // Σ_l aux_l (coefficients included)
  T z_sum = 0;
};

struct ModelLossWeights {
  double ce = 1.0;
  double aux = 1.0;
  double z = 1.0;
  // Per-row weights replacing ce / aux (empty: uniform), where a semantics rule weights the rows of one source
  // rank differently (ce-per-cp-rank, per-token-aux-local-tokens).
  std::vector<double> ce_rows{};
  std::vector<double> aux_rows{};
};

// global_aux: per-layer state before this microbatch (empty = fresh for every layer); global_aux_group: per-layer
// statistics of the whole group when it spans more than this microbatch (empty = this microbatch is the group).
template <typename T>
ModelForward<T> model_forward(const ModelConfig& config, const ModelParams<T>& params, const TokenBatch& batch,
                              const std::vector<GlobalAuxState>& global_aux = {},
                              const std::vector<GlobalAuxGroup>& global_aux_group = {});

// Gradients in the shape of the parameters (expert_bias and tid2eid of each layer stay empty).
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

template <typename T>
ModelParams<T> random_model_params(const ModelConfig& config, std::uint64_t seed);

// Ids and labels uniform in [0, V); every token valid.
TokenBatch random_token_batch(const ModelConfig& config, int seq, int batch, std::uint64_t seed);

}  // namespace moe
