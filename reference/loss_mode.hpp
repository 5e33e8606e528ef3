// How the losses of a step's microbatches combine into the objective, under Megatron's names:
//   sum        the default DDP path: per-microbatch mean losses, gradients pre-scaled by 1/|dp_cp| then SUMmed
//   avg        average_in_collective: the same objective, the collective averages
//   per_token  calculate_per_token_loss: losses summed over tokens, ÷ the global valid-token count at the end
#pragma once

#include "reference/named.hpp"

#include <string_view>

namespace moe {

enum class LossMode { sum, avg, per_token };
inline constexpr Named<LossMode> kLossModeNames[] = {
    {LossMode::sum, "sum"}, {LossMode::avg, "avg"}, {LossMode::per_token, "per-token"}};
constexpr std::span<const Named<LossMode>> names_of(LossMode) { return kLossModeNames; }
inline std::string_view to_string(LossMode mode) { return name_of(mode); }
// Throws std::invalid_argument listing the modes.
inline LossMode parse_loss_mode(std::string_view text) { return parse_named<LossMode>(text, "loss mode"); }

}  // namespace moe
