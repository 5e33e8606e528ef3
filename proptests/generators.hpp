// RapidCheck generators of scenarios (scenario.hpp) and of parallel layouts.
//
// Only combinations the code supports are generated (E divisible by ep; ffn_hidden by etp; the shared expert's
// width by tp; seq by tp, and by 2·cp·tp when cp > 1; B divisible by micro_batch·dp·gtp; a valid MoeConfig),
// and every choice lists its simplest value first, so shrinking walks toward one rank, few experts, short
// sequences and the plain options. Most cases are small: worlds of 1–8 ranks are the common draw, 16–32 rare.
#pragma once

#include "proptests/scenario.hpp"

#include <rapidcheck.h>

#include <optional>

namespace moe::proptest {

// Constraints a property puts on its scenarios.
struct ScenarioShape {
  std::optional<LossMode> mode;                // unset: any scaling path
  std::optional<dist::DispatcherKind> dispatcher;
  bool dropless = false;                       // no capacity factor
  bool capacity = false;                       // a capacity factor (drop, optionally pad)
  bool no_padding = false;                     // every token valid
  bool hash_layers = false;                    // at least one hash layer, micro batch > 1
  bool bias_update = false;                    // sigmoid/sqrtsoftplus with expert bias and its update
  bool megatron = false;                       // a Megatron semantics profile (or its API-user variant, whose
                                               // router sees the padding mask), with padding
  bool attention = false;                      // blocks with causal attention (heads over tp, K/V over cp)
  bool mtp = false;                            // multi-token prediction (pp = 1), with or without attention
  bool replicas = false;                       // for replicated experts: ETP 1, EP ≥ 2, hot experts more often
  bool waves = false;                          // for wave-scheduled experts: AlltoAll, ≥ 2 local experts per rank
  bool gtp = false;                            // GTP axes: gtp 2, egtp 2 where the expert mesh allows it (else 1);
                                               // sum or per-token (Megatron refuses AVG with GTP); world ≤ 32
};

// One of `options`, chosen with probability ∝ its weight, shrinking toward the first option (RapidCheck's
// weightedElement does not shrink). Call inside a generator or property.
template <typename T>
T weighted(std::initializer_list<std::pair<int, T>> options) {
  int total = 0;
  for (const auto& o : options) total += o.first;
  int r = *rc::gen::inRange(0, total);
  for (const auto& o : options) {
    if (r < o.first) return o.second;
    r -= o.first;
  }
  return options.begin()->second;
}

rc::Gen<Scenario> scenarios(const ScenarioShape& shape = {});

// Layouts for dispatcher-level properties: world ≤ 32, ep dividing `num_experts`, any tp and etp.
rc::Gen<ParallelLayout> dispatch_layouts(int num_experts);

}  // namespace moe::proptest
