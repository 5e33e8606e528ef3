#include "reference/semantics.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

namespace moe {
namespace {

using enum Deviation;
using enum DeviationKind;

// clang-format off
// Function-local statics: profiles may be looked up during other translation units' static initialisation.
const std::vector<DeviationInfo>& catalogue() {
  static const std::vector<DeviationInfo> entries = {
  {ce_per_cp_rank, "ce-per-cp-rank", modelled,
   "each CP rank divides its CE by its own valid-token count N_c; DDP then scales by 1/(dp·cp): "
   "J_ce = 1/(dp·cp·m)·Σ_{r,i,c} CE_c/N_c",
   "the microbatch's CE over its valid tokens, however CP splits it: J_ce = 1/(dp·m)·Σ_{r,i} CE/N",
   "pretrain_gpt.py: loss_func (num_tokens = loss_mask.sum() of the CP shard); "
   "pipeline_parallel/schedules.py: forward_step (output_tensor /= clamp(num_tokens, 1))",
   "NVIDIA/Megatron-LM issue #7452; PR #7513 (open) proposes the intended form",
   "cp > 1 with padding spread unevenly over the CP ranks' chunks; sum/avg", true, false, true},
  {z_loss_local_mean, "z-loss-local-mean", modelled,
   "each rank's z-loss is coeff/|tp_cp| times the mean of lse² over its own valid tokens",
   "coeff times the mean of lse² over the microbatch's valid tokens",
   "transformer/moe/router.py: TopKRouter.apply_z_loss; transformer/moe/moe_utils.py: z_loss_func",
   "-",
   "tp·cp > 1 with valid tokens uneven across the tp×cp ranks, z-loss on; sum/avg (per-token multiplies by "
   "num_local_tokens·|tp_cp|, which undoes the local mean exactly)", true, false, true},
  {seq_aux_mean_length, "seq-aux-mean-length", modelled,
   "seq_aux uses one T for every sequence of the microbatch: the mean valid length of its sequences",
   "each sequence's statistic over its own valid tokens (T = that sequence's valid length)",
   "transformer/moe/router.py: TopKRouter seq_aux_loss path (seq_length · bsz tokens folded, valid count / bsz)",
   "-",
   "seq_aux with padding and micro-batch ≥ 2, sequences of different valid lengths", true, true, false},
  {bias_counts_padded_slots, "bias-counts-padded-slots", modelled,
   "expert-bias counts are the final routing map's column sums, which under pad_to_capacity include the padded "
   "capacity slots",
   "counts are real assignments only: padded slots (probability 0, never routed) are left out",
   "transformer/moe/router.py: TopKRouter.routing (local_tokens_per_expert += routing_map.sum(0))",
   "-",
   "expert bias with an update rate, capacity_factor and pad_to_capacity", true, true, false},
  {per_token_aux_local_tokens, "per-token-aux-local-tokens", modelled,
   "per-token loss: each rank's aux share is scaled by its own valid tokens × |tp_cp|",
   "each share is scaled by the microbatch's valid tokens N_mb (all-reduced over tp×cp), as Megatron dev does",
   "transformer/moe/router.py: TopKRouter.attach_and_log_load_balancing_loss (aux_loss · num_local_tokens · "
   "tp_cp_group.size())",
   "PR #5047 added |tp_cp|; Megatron dev all-reduces the count instead",
   "per-token loss with valid tokens uneven across the tp×cp ranks, aux or seq_aux", false, true, true},
  {global_aux_dp_average, "global-aux-dp-average", modelled,
   "global_aux's backward scale is that of aux (cp/m): the replicas' shares are averaged over dp, a gradient "
   "1/dp too small",
   "the global_aux term of a step is the group's loss, the sum of every replica's share (scale dp·cp/m)",
   "transformer/moe/router.py: attach_and_log_load_balancing_loss; transformer/moe/moe_utils.py: "
   "MoEAuxLossAutoScaler",
   "NVIDIA/Megatron-LM issue #3672; PRs #3768, #3769, #5007 (open)",
   "global_aux with dp > 1 (per-token: with dp > 1 or uneven valid tokens, global_aux weighted as aux is)", true,
   true, false},
  {shared_expert_clamped, "shared-expert-clamped", modelled,
   "activation_func_clamp_value also clamps the shared expert's SwiGLU",
   "the clamp applies to the routed experts only, unless shared_expert_clamp is set (DeepSeek-V4's own code "
   "does not clamp the shared expert)",
   "transformer/moe/shared_experts.py: SharedExpertMLP (built from the layer's TransformerConfig)",
   "-",
   "a shared expert with swiglu_clamp set and pre-activations beyond the clamp", true, true, false},
  {fused_swiglu_ignores_clamp, "fused-swiglu-ignores-clamp", modelled,
   "with bias_activation_fusion the clamp is silently not applied (the fused SwiGLU is called without "
   "activation_func_clamp_value); the unfused path clamps",
   "the clamp applies whatever the fusion flag",
   "transformer/mlp.py: MLP.forward; transformer/moe/experts.py (bias_swiglu_impl / weighted_bias_swiglu_impl)",
   "- (found by running megatron-core 0.19.2 on CPU)",
   "swiglu_clamp set, bias_activation_fusion on, pre-activations beyond the clamp (not in the profiles: "
   "turn it on with ,+fused-swiglu-ignores-clamp when the run fuses)", true, true, false},
  {position_drop_tie_order, "position-drop-tie-order", replayed,
   "drop policy position keeps torch.topk(routing_map.int(), k=cap, sorted=False) of an expert's column: among "
   "routed tokens (all tied at 1) the kept set is torch's tie order, not the earliest",
   "the earliest routed tokens of the source rank are kept (what Megatron's docstring says)",
   "transformer/moe/moe_utils.py: apply_router_token_dropping",
   "-",
   "capacity_factor with drop_policy position and an expert over capacity; compare DIR replays the dump's map",
   true, true, false},
  {pad_filler_tie_order, "pad-filler-tie-order", replayed,
   "pad_to_capacity fills an under-full expert with torch.topk's choice among its zero-probability tokens",
   "the earliest tokens not routed to the expert fill it",
   "transformer/moe/moe_utils.py: apply_router_token_dropping (capacity_mask of topk over probs)",
   "-",
   "pad_to_capacity with an expert under capacity; only the routing map differs (fillers carry probability 0, "
   "so y and gradients agree); compare DIR replays the dump's map",
   true, true, false},
  {gtp_factor_missing, "gtp-factor-missing", scaling,
   "expert grads are not corrected by egtp/gtp when GTP rematerialisation axes exist",
   "expert grads pre-scaled by 1/|dp_cp| · egtp/gtp",
   "distributed/distributed_data_parallel.py: DistributedDataParallel.__init__ (expert_gradient_scaling_factor)",
   "PRs #7160, #7165 (the correction, merged 2026-09-09, after the main snapshot)",
   "gtp ≠ egtp in sum mode (the routed experts' gradients gtp/egtp times the intended ones)", true, false, false},
  {router_counts_padding, "router-counts-padding", modelled,
   "no training entry point passes padding_mask to the model: the router routes padded tokens like real ones and "
   "counts them in the aux, seq_aux, global_aux and z statistics and the expert-bias counts (per-token loss then "
   "weights aux and z by all local tokens)",
   "padded tokens (loss mask 0) are left out of every router statistic",
   "pretrain_gpt.py: forward_step (model(...) with loss_mask, no padding_mask); models/gpt/gpt_model.py: "
   "GPTModel.forward (padding_mask defaults to None)",
   "- (the mask exists for direct API callers; issue #7452 reports padding-mask handling)",
   "any padding with an aux loss, a z-loss or an expert-bias update (CE is masked either way)", true, true, false},
  {bias_counts_mask_broadcast, "bias-counts-mask-broadcast", refused,
   "with a padding mask the expert-bias count combines the [N, E] routing map with the [N] mask: RuntimeError "
   "when N ≠ E (the wrong axis masked when N = E)",
   "the counts of valid tokens",
   "transformer/moe/router.py: TopKRouter._apply_expert_bias",
   "NVIDIA/Megatron-LM issue #6111, PR #6114 (on main since 723db5a7, 2026-08-20; not in 0.19.2)",
   "an expert-bias update with a padding mask that reaches the router (only with -router-counts-padding); the "
   "oracle refuses such a step", true, true, false},
  {mtp_per_token_local_ratio, "mtp-per-token-local-ratio", modelled,
   "under per-token loss each CP rank scales depth k's MTP CE by λ/D·N_c/Nᵏ_c, its own valid tokens over its own "
   "rolled valid tokens in the microbatch; the step then divides by N",
   "λ/D·N/Nᵏ with N and Nᵏ the whole batch's: every depth-k token weighs λ/D/Nᵏ",
   "transformer/multi_token_prediction.py: process_mtp_loss (original_num_tokens = loss_mask.sum() and "
   "roll_tensor's sum, both of the CP shard)",
   "-",
   "multi-token prediction under per-token loss wherever the rolled-away tokens are not in proportion on every "
   "rank: padding, or any dp, cp or micro-batch split (the last k positions of a sequence sit on one CP rank)",
   false, true, true},
  {v2_gate_softmax_scaled, "v2-gate-softmax-scaled", mapped,
   "transformers' DeepSeek-V2 gate takes softmax scores, keeps the top k without renormalising and multiplies them "
   "by routed_scaling_factor, whatever norm_topk_prob and scoring_func say",
   "the gate of DeepSeek's own modeling_deepseek.py (the config's auto_map): scoring_func's scores, renormalised "
   "when norm_topk_prob and k > 1, scaled only when not renormalised",
   "transformers 5.25: models/deepseek_v2/modeling_deepseek_v2.py: the MoE gate's forward (softmax in float32, "
   "× routed_scaling_factor)",
   "-",
   "a DeepSeek-V2 config.json with norm_topk_prob true and k > 1, or scoring_func not softmax; applied when the "
   "config is mapped (--model, moe-oracle config)", true, true, false},
  {clamp_limit_passes_gradient, "clamp-limit-passes-gradient", modelled,
   "torch's clamp with scalar bounds passes the gradient at the limit itself (subgradient 1): a SwiGLU "
   "pre-activation equal to ±L still gets its gradient. torch 2.11 does so on CPU and GPU; torch 2.15 does not",
   "the minimum-norm subgradient, PyTorch's documented convention and torch 2.15's clamp: no gradient at ±L",
   "torch: tools/autograd/derivatives.yaml and FunctionsManual.cpp clamp_backward (self >= min, self <= max); "
   "called by Megatron's transformer/mlp.py glu() and transformers' SwiGLU clamps",
   "pytorch/pytorch issue #184574 (the change to strict inequalities); PR #7049 (2018) made it 1",
   "swiglu_clamp with pre-activations exactly on the limit: bf16 or float32 storage (float64 data never lands "
   "on it). Not in the profiles, which pin frameworks, not torch: moe_capture probes the live torch and adds it",
   true, true, false},
  {per_token_aux_group_tokens, "per-token-aux-group-tokens", modelled,
   "with a padding mask at the router, per-token-aux-local-tokens' local count is its reduce group's: the count is "
   "all-reduced in place before it is read, so each rank's aux share is scaled by the group's valid tokens × "
   "|tp_cp| (aux, seq_aux: the microbatch's over tp×cp; global_aux: the step's over tp×dp×cp)",
   "the rank's own valid tokens × |tp_cp| (the rule per-token-aux-local-tokens states)",
   "transformer/moe/moe_utils.py: get_tokens_per_expert_and_token_count (local_tokens_per_expert handed to "
   "reduce_from_tensor_model_parallel_region, whose all_reduce mutates it, then summed as the local count)",
   "NVIDIA/Megatron-LM PR #7481 (open); shown here by Megatron's own step (docs/checking-frameworks.md)",
   "per-token loss with tp·cp > 1 (global_aux: tp·dp·cp > 1), an aux loss and a padding mask at the router "
   "(-router-counts-padding); without the mask the count is the tensor's shape, which is local. In effect only "
   "with per-token-aux-local-tokens",
   false, true, true},
};
  return entries;
}

const std::vector<SemanticsProfile>& profiles() {
  static const std::vector<SemanticsProfile> entries = {
  {"intended", "-",
   "the layout-invariant objective: every deviation off", {}},
  {"megatron-core-0.19", "megatron-core 0.19.2 (PyPI)",
   "what megatron-core 0.19.2 computes when trained through pretrain_gpt.py with bias_activation_fusion off (add "
   ",+fused-swiglu-ignores-clamp when it fuses; -router-counts-padding for a loop that passes padding_mask)",
   {ce_per_cp_rank, z_loss_local_mean, seq_aux_mean_length, bias_counts_padded_slots, per_token_aux_local_tokens,
    global_aux_dp_average, shared_expert_clamped, position_drop_tie_order, pad_filler_tie_order,
    gtp_factor_missing, router_counts_padding, bias_counts_mask_broadcast, mtp_per_token_local_ratio,
    per_token_aux_group_tokens}},
  {"megatron-main", "NVIDIA/Megatron-LM main d98e8a64 (2026-08-22)",
   "what Megatron-LM main computed at the snapshot read for this catalogue, trained through pretrain_gpt.py with "
   "bias_activation_fusion off",
   {ce_per_cp_rank, z_loss_local_mean, seq_aux_mean_length, bias_counts_padded_slots, per_token_aux_local_tokens,
    global_aux_dp_average, shared_expert_clamped, position_drop_tie_order, pad_filler_tie_order,
    gtp_factor_missing, router_counts_padding, mtp_per_token_local_ratio, per_token_aux_group_tokens}},
  {"hf-transformers-5.25", "transformers 5.25.0 (PyPI)",
   "what Hugging Face transformers 5.25's MoE blocks compute where they differ from the models' own reference code: "
   "DeepSeek-V4's shared expert clamped like the routed ones, DeepSeek-V2's gate (a config.json is mapped under it)",
   {shared_expert_clamped, v2_gate_softmax_scaled}},
  };
  return entries;
}
// clang-format on

std::string known_names() {
  std::string known;
  for (const auto& d : catalogue()) known += (known.empty() ? "" : ", ") + std::string(d.name);
  return known;
}

}  // namespace

std::string_view to_string(DeviationKind kind) {
  switch (kind) {
    case DeviationKind::modelled: return "modelled";
    case DeviationKind::replayed: return "replayed";
    case DeviationKind::scaling: return "scaling";
    case DeviationKind::refused: return "refused";
    case DeviationKind::mapped: return "mapped";
  }
  throw std::logic_error("unknown DeviationKind");
}

const std::vector<DeviationInfo>& deviation_catalogue() { return catalogue(); }

const DeviationInfo& deviation_info(Deviation d) { return catalogue().at(static_cast<size_t>(d)); }

Deviation parse_deviation(std::string_view name) {
  for (const auto& d : catalogue())
    if (d.name == name) return d.id;
  throw std::invalid_argument("unknown deviation '" + std::string(name) + "' (known: " + known_names() + ")");
}

const std::vector<SemanticsProfile>& semantics_profiles() { return profiles(); }

Semantics Semantics::profile(std::string_view name) {
  std::string known;
  for (const auto& p : profiles()) {
    if (p.name == name) {
      Semantics s;
      s.base_ = p.name;
      for (Deviation d : p.deviations) s.on_.set(static_cast<size_t>(d));
      return s;
    }
    known += (known.empty() ? "" : ", ") + std::string(p.name);
  }
  throw std::invalid_argument("unknown semantics profile '" + std::string(name) + "' (known: " + known + ")");
}

Semantics Semantics::parse(std::string_view spec) {
  const auto comma = spec.find(',');
  Semantics s = profile(spec.substr(0, comma));
  std::string_view rest = comma == std::string_view::npos ? std::string_view() : spec.substr(comma + 1);
  // A deviation named twice is refused: "+x,-x" contradicts itself, and taking the last would hide that the
  // spec does not say what its writer meant; "+x,+x" is refused alike (one way to write each spec).
  std::vector<Deviation> named;
  while (comma != std::string_view::npos) {
    const auto next = rest.find(',');
    const std::string_view item = rest.substr(0, next);
    if (item.size() < 2 || (item[0] != '+' && item[0] != '-'))
      throw std::invalid_argument("semantics '" + std::string(spec) + "': '" + std::string(item) +
                                  "' is not +deviation or -deviation");
    const Deviation d = parse_deviation(item.substr(1));
    if (std::find(named.begin(), named.end(), d) != named.end())
      throw std::invalid_argument("semantics '" + std::string(spec) + "': deviation '" +
                                  std::string(item.substr(1)) + "' is named twice");
    named.push_back(d);
    s = s.with(d, item[0] == '+');
    if (next == std::string_view::npos) break;
    rest = rest.substr(next + 1);
  }
  return s;
}

Semantics Semantics::with(Deviation d, bool on) const {
  Semantics s = *this;
  s.on_.set(static_cast<size_t>(d), on);
  return s;
}

Semantics Semantics::in_mode(LossMode mode) const {
  Semantics s = *this;
  for (const auto& d : catalogue()) {
    const bool applies = mode == LossMode::per_token ? d.per_token_mode : d.mean_modes;
    if (!applies) s.on_.reset(static_cast<size_t>(d.id));
  }
  // per-token-aux-group-tokens changes what per-token-aux-local-tokens counts, and only where a padding mask reaches
  // the router (without one Megatron's count is the tensor's shape, which is local).
  if (!s.has(Deviation::per_token_aux_local_tokens) || s.has(Deviation::router_counts_padding))
    s.on_.reset(static_cast<size_t>(Deviation::per_token_aux_group_tokens));
  return s;
}

std::vector<Deviation> Semantics::deviations() const {
  std::vector<Deviation> out;
  for (const auto& d : catalogue())
    if (has(d.id)) out.push_back(d.id);
  return out;
}

std::string Semantics::spec() const {
  const Semantics base = profile(base_);
  std::string out(base_);
  for (const auto& d : catalogue())
    if (has(d.id) != base.has(d.id)) out += std::string(has(d.id) ? ",+" : ",-") + std::string(d.name);
  return out;
}

}  // namespace moe
