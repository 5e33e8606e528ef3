// How the losses of a step's microbatches combine into the objective, under Megatron's names:
//   sum        the default DDP path: per-microbatch mean losses, gradients pre-scaled by 1/|dp_cp| then SUMmed
//   avg        average_in_collective: the same objective, the collective averages
//   per_token  calculate_per_token_loss: losses summed over tokens, ÷ the global valid-token count at the end
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace moe {

enum class LossMode { sum, avg, per_token };

inline std::string_view to_string(LossMode mode) {
  switch (mode) {
    case LossMode::sum: return "sum";
    case LossMode::avg: return "avg";
    case LossMode::per_token: return "per-token";
  }
  throw std::logic_error("unknown LossMode");
}

// Throws std::invalid_argument listing the modes.
inline LossMode parse_loss_mode(std::string_view text) {
  for (LossMode m : {LossMode::sum, LossMode::avg, LossMode::per_token})
    if (text == to_string(m)) return m;
  throw std::invalid_argument("unknown loss mode '" + std::string(text) + "' (known: sum, avg, per-token)");
}

}  // namespace moe
