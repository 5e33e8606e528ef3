#include "reference/config.hpp"

#include <cmath>
#include <stdexcept>
#include <string>

namespace moe {
namespace {

void require(bool ok, const std::string& rule) {
  if (!ok) throw std::invalid_argument("invalid MoE config: " + rule);
}

}  // namespace

void MoeConfig::validate() const {
  require(hidden > 0, "hidden must be > 0");
  require(num_experts > 0, "num_experts must be > 0");
  require(ffn_hidden > 0, "ffn_hidden must be > 0");
  // Upper bounds far above any published model (hidden 7168, 384 experts, ffn 18432), so that every size derived
  // from them (E·h, E·d·h) is computed without overflow and refused by a memory estimate rather than by the allocator.
  constexpr int kMaxWidth = 1 << 20, kMaxExperts = 1 << 16;
  require(hidden <= kMaxWidth && ffn_hidden <= kMaxWidth && shared_expert_ffn_hidden <= kMaxWidth &&
              latent_size <= kMaxWidth,
          "hidden, ffn_hidden, shared_expert_ffn_hidden and latent_size must be <= 2^20");
  require(num_experts <= kMaxExperts, "num_experts must be <= 2^16");
  require(topk >= 1 && topk <= num_experts, "topk must be in [1, num_experts]");
  require(std::isfinite(topk_scaling_factor) && topk_scaling_factor > 0, "topk_scaling_factor must be finite and > 0");

  const bool biased_score = score_function != ScoreFunction::softmax;
  require(!(pre_softmax && biased_score), "pre_softmax only applies to score_function softmax");
  require(!(score_function == ScoreFunction::softmax && !pre_softmax && topk == 1 && !hash_routing),
          "post-softmax with topk = 1 gives weight 1 to every token; use pre_softmax");
  require(!(expert_bias && !biased_score), "expert_bias requires score_function sigmoid or sqrtsoftplus");
  require(!(expert_bias && hash_routing), "expert_bias is disabled on hash layers (selection is the tid2eid table)");

  require(num_groups >= 0 && group_topk >= 0, "num_groups and group_topk must be >= 0");
  require((num_groups == 0) == (group_topk == 0), "num_groups and group_topk are set together");
  if (num_groups > 0) {
    require(!hash_routing, "group-limited routing does not apply to hash layers");
    require(num_experts % num_groups == 0, "num_groups must divide num_experts");
    require(group_topk <= num_groups, "group_topk must be <= num_groups");
    require(topk % group_topk == 0, "group_topk must divide topk");
    require(topk / group_topk <= num_experts / num_groups,
            "topk / group_topk must not exceed the experts per group");
    require(topk <= group_topk * (num_experts / num_groups), "topk must not exceed the experts in the kept groups");
  }

  // 0 is a clamp, not "none": gate ≤ 0 and up = 0, so the expert outputs 0 (transformers 5.25 and Megatron apply
  // the clamp whatever L is; DeepSeek-V4's swiglu_limit: 0 reaches here).
  if (swiglu_clamp) require(std::isfinite(*swiglu_clamp) && *swiglu_clamp >= 0, "swiglu_clamp must be finite and >= 0");
  require(shared_expert_ffn_hidden >= 0, "shared_expert_ffn_hidden must be >= 0");
  require(!(shared_expert_gate && !has_shared_expert()), "shared_expert_gate requires a shared expert");
  require(!(shared_expert_clamp && !has_shared_expert()), "shared_expert_clamp requires a shared expert");
  require(!(shared_expert_clamp && !swiglu_clamp), "shared_expert_clamp requires swiglu_clamp");
  require(latent_size >= 0, "latent_size must be >= 0");
  require(!(apply_probs_on_input && topk != 1), "apply_probs_on_input requires topk = 1");

  if (capacity_factor) require(std::isfinite(*capacity_factor) && *capacity_factor > 0, "capacity_factor must be > 0");
  require(!(pad_to_capacity && !capacity_factor), "pad_to_capacity requires capacity_factor");

  require((aux_loss_type == AuxLossType::none) == (aux_loss_coeff == 0.0),
          "aux_loss_coeff must be > 0 exactly when aux_loss_type is set");
  require(aux_loss_coeff >= 0 && std::isfinite(aux_loss_coeff), "aux_loss_coeff must be finite and >= 0");
  require(z_loss_coeff >= 0 && std::isfinite(z_loss_coeff), "z_loss_coeff must be finite and >= 0");
  if (bias_update_rate) {
    require(expert_bias, "bias_update_rate requires expert_bias");
    require(std::isfinite(*bias_update_rate) && *bias_update_rate >= 0, "bias_update_rate must be finite and >= 0");
  }
}

void MoeConfig::check_padding_supported(bool any_padded) const {
  if (any_padded && bias_update_rate && semantics.has(Deviation::bias_counts_mask_broadcast))
    throw std::invalid_argument("semantics " + semantics.spec() +
                                ": Megatron raises on an expert-bias update with a padding mask "
                                "(bias-counts-mask-broadcast); keep router-counts-padding on or turn the update off");
}

std::optional<double> MoeConfig::routed_clamp() const {
  return semantics.has(Deviation::fused_swiglu_ignores_clamp) ? std::nullopt : swiglu_clamp;
}

std::optional<double> MoeConfig::shared_clamp() const {
  if (!has_shared_expert() || !(shared_expert_clamp || semantics.has(Deviation::shared_expert_clamped)))
    return std::nullopt;
  return routed_clamp();
}

}  // namespace moe
