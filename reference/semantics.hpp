// Semantics: where a pinned Megatron-Core version computes something other than the intended objective, the
// difference is a named deviation, and a Semantics value says which deviations are on. The oracle and the
// parallel system both read the same value (it travels in MoeConfig), so a rule is switched in one place.
//
//   intended             every deviation off: the layout-invariant objective of global_step.hpp
//   megatron-core-0.19   what megatron-core 0.19.2 (PyPI) computes
//   megatron-main        what Megatron-LM main computes at d98e8a64 (2026-08-22)
// A profile is a list of deviations; `--semantics P,+id,-id` turns single deviations on or off on top of one.
//
// Each deviation is one of three kinds:
//   modelled  both sides implement the switch: the oracle computes Megatron's number and the parallel system
//             reproduces it (check --semantics P runs them against each other)
//   replayed  not a rule but an accident (torch.topk's tie order): no code can predict it; the oracle takes
//             the decision as input (CapacityDecision) when it is compared with a dump of a Megatron run
//   scaling   a row of the gradient-scaling table (scaling_rules.hpp) under the profile
//   refused   Megatron raises on this input: the oracle refuses it too, naming the deviation
#pragma once

#include "reference/loss_mode.hpp"

#include <bitset>
#include <string>
#include <string_view>
#include <vector>

namespace moe {

enum class Deviation {
  ce_per_cp_rank,              // CE ÷ each CP rank's own valid tokens
  z_loss_local_mean,           // z-loss: coeff/|tp_cp| × this rank's valid mean
  seq_aux_mean_length,         // seq_aux: one T for every sequence, the mean valid length
  bias_counts_padded_slots,    // expert-bias counts include pad_to_capacity slots
  per_token_aux_local_tokens,  // per-token aux × num_local_tokens·|tp_cp| instead of the microbatch's count
  global_aux_dp_average,       // global_aux gradient 1/dp too small
  shared_expert_clamped,       // the SwiGLU clamp applies to the shared expert too
  fused_swiglu_ignores_clamp,  // bias_activation_fusion drops the SwiGLU clamp
  position_drop_tie_order,     // drop policy `position` keeps torch.topk's choice among ties
  pad_filler_tie_order,        // pad_to_capacity fills with torch.topk's choice among zero-probability tokens
  gtp_factor_missing,          // no egtp/gtp correction of expert grads under GTP
  router_counts_padding,       // no padding mask reaches the router: padded tokens count in its statistics
  bias_counts_mask_broadcast,  // expert-bias counting with a padding mask raises (megatron-core 0.19.2)
  mtp_per_token_local_ratio,   // per-token MTP CE × each CP rank's own N_c/Nᵏ_c instead of the batch's N/Nᵏ
  v2_gate_softmax_scaled,      // transformers' DeepSeek-V2 gate: softmax, no renormalisation, always × the scale
  clamp_limit_passes_gradient, // torch before 2.15: the clamp passes the gradient at its limit (subgradient 1)
  per_token_aux_group_tokens,  // per-token aux × the reduce group's count·|tp_cp| (the local count reduced in place)
};
constexpr int kDeviations = static_cast<int>(Deviation::per_token_aux_group_tokens) + 1;  // the last one + 1

// modelled: the oracle computes it; replayed: compare takes the decision from the dump; scaling: a gradient scale;
// refused: the oracle refuses the step; mapped: applied when a Hugging Face config.json is mapped onto the layer
// (model_files/hf_config.cpp), so the oracle computes the mapped layer and toggling it later changes nothing.
enum class DeviationKind { modelled, replayed, scaling, refused, mapped };
std::string_view to_string(DeviationKind kind);  // "modelled", "replayed", "scaling", "refused", "mapped"

struct DeviationInfo {
  Deviation id;
  std::string_view name;       // kebab-case, as on the command line
  DeviationKind kind;
  std::string_view statement;  // what Megatron computes, in one line
  std::string_view intended;   // what the intended objective computes instead
  std::string_view megatron;   // file: function at the pinned versions
  std::string_view upstream;   // issue / PR
  std::string_view visible;    // which layouts and options make it show
  bool mean_modes;             // in effect under sum/avg
  bool per_token_mode;         // in effect under per-token
  bool tp_cp_dependent;        // makes a dropless objective change with tp or cp at fixed dp and micro-batch
};

// Every deviation, in Deviation order.
const std::vector<DeviationInfo>& deviation_catalogue();
const DeviationInfo& deviation_info(Deviation d);
Deviation parse_deviation(std::string_view name);  // throws std::invalid_argument listing the names

struct SemanticsProfile {
  std::string_view name;
  std::string_view pinned;  // the version or commit it encodes
  std::string_view description;
  std::vector<Deviation> deviations;
};
const std::vector<SemanticsProfile>& semantics_profiles();

class Semantics {
 public:
  Semantics() = default;  // intended
  static Semantics profile(std::string_view name);  // throws std::invalid_argument listing the profiles
  // "P" or "P,+id,-id…": a profile with single deviations turned on (+) or off (−).
  static Semantics parse(std::string_view spec);

  bool has(Deviation d) const { return on_.test(static_cast<size_t>(d)); }
  Semantics with(Deviation d, bool on) const;
  // The deviations that take effect under a loss mode (e.g. ce-per-cp-rank only in sum/avg), and their preconditions
  // (per-token-aux-group-tokens only with per-token-aux-local-tokens and a padding mask at the router).
  Semantics in_mode(LossMode mode) const;
  std::vector<Deviation> deviations() const;
  // The profile it started from, then its changes: "megatron-core-0.19,-ce-per-cp-rank". parse(spec()) == *this.
  std::string spec() const;
  bool intended() const { return on_.none(); }

  bool operator==(const Semantics& o) const { return on_ == o.on_; }

 private:
  std::string_view base_ = "intended";
  std::bitset<kDeviations> on_;
};

}  // namespace moe
