// The configuration of one MoE layer: every option of the oracle, with the rules that make a combination valid.
//
// Names follow docs/layer.md and the golden case format (golden/README.md); Megatron's flag names are given where
// they differ.
// A default-constructed MoeConfig is not valid: hidden, num_experts, topk and ffn_hidden must be set.
#pragma once

#include "reference/named.hpp"
#include "reference/semantics.hpp"

#include <optional>
#include <string>
#include <string_view>

namespace moe {

enum class ScoreFunction { softmax, sigmoid, sqrtsoftplus };
// How sigmoid/sqrtsoftplus weights are renormalised over the selected experts (softmax is never affected).
//   megatron: w = s_I / (Σ s_I + 1e-20) only when k > 1 (hash layers: always)
//   deepseek: w = s_I / Σ s_I always, no epsilon
enum class Normalization { megatron, deepseek };
enum class DropPolicy { probs, position };
enum class AuxLossType { none, aux, seq_aux, global_aux };

struct MoeConfig {
  // Shapes. h = hidden, E = num_experts, k = topk, d = ffn_hidden (per routed expert).
  int hidden = 0;
  int num_experts = 0;
  int topk = 0;
  int ffn_hidden = 0;

  // Router (moe_router_score_function, moe_router_pre_softmax, moe_router_topk_scaling_factor).
  ScoreFunction score_function = ScoreFunction::softmax;
  bool pre_softmax = false;
  double topk_scaling_factor = 1.0;  // α, DeepSeek's route_scale
  Normalization normalization = Normalization::megatron;
  bool expert_bias = false;  // β, selection only (moe_router_enable_expert_bias)
  int num_groups = 0;        // 0 = no group-limited routing (moe_router_num_groups)
  int group_topk = 0;        // groups kept per token (moe_router_group_topk)
  bool hash_routing = false; // I_t = tid2eid[input_id_t] (DeepSeek-V4 hash layers)

  // Experts. swiglu_clamp L ≥ 0: gate ≤ L, up ∈ [−L, L] (L = 0: up = 0); unset: no clamp (activation_func_clamp_value).
  std::optional<double> swiglu_clamp;
  int shared_expert_ffn_hidden = 0;  // 0 = no shared expert (moe_shared_expert_intermediate_size)
  bool shared_expert_gate = false;
  bool shared_expert_clamp = false;  // apply swiglu_clamp to the shared expert too (Megatron does; DeepSeek doesn't)
  int latent_size = 0;               // 0 = experts work in h (moe_latent_size)
  bool apply_probs_on_input = false; // k = 1 only (moe_apply_probs_on_input)
  bool fp8_dispatch = false;         // the routed experts' input rows fake-quantised to FP8 (reference/fp8_quant.hpp)
  bool bf16_storage = false;         // activations rounded to bf16 at the model's storage points (reference/bf16.hpp)
  bool bf16_router = false;          // the router's logits, scores and weights stored in bf16 (a router whose weight
                                     // is bf16 computes in bf16); storage points of compare's rounding oracle only

  // Capacity (moe_expert_capacity_factor, moe_token_drop_policy, moe_pad_expert_input_to_capacity).
  std::optional<double> capacity_factor;  // unset = dropless
  DropPolicy drop_policy = DropPolicy::probs;
  bool pad_to_capacity = false;

  // Losses and balancing.
  AuxLossType aux_loss_type = AuxLossType::none;
  double aux_loss_coeff = 0.0;
  double z_loss_coeff = 0.0;
  std::optional<double> bias_update_rate;  // unset = no update (moe_router_bias_update_rate)

  // Which Megatron deviations from the intended objective are on (semantics.hpp); default: intended.
  Semantics semantics;

  // The width the routed experts work in: latent_size when latent MoE is on, else hidden.
  int expert_width() const { return latent_size > 0 ? latent_size : hidden; }
  bool has_shared_expert() const { return shared_expert_ffn_hidden > 0; }
  bool uses_score_normalisation() const { return score_function != ScoreFunction::softmax; }
  // The clamp the routed experts' SwiGLU applies: swiglu_clamp, unless fused-swiglu-ignores-clamp drops it.
  std::optional<double> routed_clamp() const;
  // The shared expert's: swiglu_clamp when shared_expert_clamp is set or the shared-expert-clamped deviation is on
  // (then subject to fused-swiglu-ignores-clamp too); else none.
  std::optional<double> shared_clamp() const;
  // Whether a pre-activation exactly on a clamp's limit passes its gradient (clamp-limit-passes-gradient; the
  // intended objective passes none there).
  bool clamp_limit_passes() const { return semantics.has(Deviation::clamp_limit_passes_gradient); }

  // Throws std::invalid_argument naming the first broken rule (docs/layer.md, "Invalid combinations").
  void validate() const;
  // Throws when the semantics say Megatron raises on this layer with padded tokens reaching the router
  // (bias-counts-mask-broadcast).
  void check_padding_supported(bool any_padded) const;
};

// The names of the config's choices, as the golden format and the Python package spell them; the parsers throw
// std::invalid_argument "unknown <key> '<text>' (<names>)".
inline constexpr Named<ScoreFunction> kScoreFunctionNames[] = {{ScoreFunction::softmax, "softmax"},
                                                               {ScoreFunction::sigmoid, "sigmoid"},
                                                               {ScoreFunction::sqrtsoftplus, "sqrtsoftplus"}};
inline constexpr Named<Normalization> kNormalizationNames[] = {{Normalization::megatron, "megatron"},
                                                               {Normalization::deepseek, "deepseek"}};
inline constexpr Named<DropPolicy> kDropPolicyNames[] = {{DropPolicy::probs, "probs"},
                                                         {DropPolicy::position, "position"}};
inline constexpr Named<AuxLossType> kAuxLossTypeNames[] = {{AuxLossType::aux, "aux"},
                                                           {AuxLossType::seq_aux, "seq_aux"},
                                                           {AuxLossType::global_aux, "global_aux"},
                                                           {AuxLossType::none, "none"}};
constexpr std::span<const Named<ScoreFunction>> names_of(ScoreFunction) { return kScoreFunctionNames; }
constexpr std::span<const Named<Normalization>> names_of(Normalization) { return kNormalizationNames; }
constexpr std::span<const Named<DropPolicy>> names_of(DropPolicy) { return kDropPolicyNames; }
constexpr std::span<const Named<AuxLossType>> names_of(AuxLossType) { return kAuxLossTypeNames; }

inline std::string_view to_string(ScoreFunction f) { return name_of(f); }
inline std::string_view to_string(Normalization n) { return name_of(n); }
inline std::string_view to_string(DropPolicy p) { return name_of(p); }
inline std::string_view to_string(AuxLossType t) { return name_of(t); }
inline ScoreFunction parse_score_function(std::string_view s) {
  return parse_named<ScoreFunction>(s, "score_function");
}
inline Normalization parse_normalization(std::string_view s) { return parse_named<Normalization>(s, "normalization"); }
inline DropPolicy parse_drop_policy(std::string_view s) { return parse_named<DropPolicy>(s, "drop_policy"); }
inline AuxLossType parse_aux_loss_type(std::string_view s) { return parse_named<AuxLossType>(s, "aux_loss_type"); }

}  // namespace moe
