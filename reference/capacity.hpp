// Capacity dropping and padding, per part of the token partition (one part = one source rank's local tokens).
//
//   cap = ceil((T_local·k / E) · capacity_factor)                      per part, as Megatron's get_capacity
//   an expert with more than cap routed rows keeps cap of them:
//     probs    — the highest probabilities (ties: earlier local row)
//     position — the earliest local rows (the documented intent; Megatron's topk over a 0/1 map is tie-order
//                dependent and may keep later rows)
//   pad_to_capacity: an expert with fewer than min(cap, T_local) rows is filled with the earliest local rows not
//                routed to it, probability 0 (GEMM rows, not assignments).
// Dropped assignments get probability 0 and leave the routing map; nothing is renormalised.
#pragma once

#include "reference/config.hpp"
#include "reference/tensor.hpp"

#include <vector>

namespace moe {

int expert_capacity(int local_tokens, int topk, int num_experts, double capacity_factor);

struct CapacityResult {
  BoolMatrix keep;    // [T, E] routed slots that survive
  BoolMatrix padded;  // [T, E] slots added by padding (never routed)
};

// `routed` [T, E] and `probs` [T, E] before dropping; `partition` covers every row once.
template <typename T>
CapacityResult apply_capacity(const MoeConfig& config, const BoolMatrix& routed, const Matrix<T>& probs,
                              const std::vector<std::vector<int>>& partition);

// Capacity decisions taken as input (replaying a framework's run where its choice among ties is torch's order,
// position-drop-tie-order and pad-filler-tie-order): `final_map` [T, E] is the routing map after dropping and
// padding. Kept = routed ∧ final_map, padded = final_map ∧ ¬routed. Throws std::invalid_argument unless it is a
// decision the rules allow: per part and expert, an over-full expert keeps exactly cap of its routed rows, an
// under-full one keeps them all, and padding (only with pad_to_capacity) fills it to min(cap, part size).
CapacityResult replay_capacity(const MoeConfig& config, const BoolMatrix& routed, const BoolMatrix& final_map,
                               const std::vector<std::vector<int>>& partition);

}  // namespace moe
