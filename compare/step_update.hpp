// The end of a step dump's step: the grad norm each rank reported and the parameters after the optimizer, judged
// against the oracle's: the norm of its whole gradient, then clipping and Adam's first step on that gradient.
//
// Tolerances, derived from the gradients' (the training_step row at the dump's precision: δᵢ = atol + rtol·|gᵢ|):
//   grad norm    |‖g′‖ − ‖g‖| ≤ ‖g′ − g‖ ≤ ‖δ‖ (triangle inequality), plus one rounding of the norm (rtol·‖g‖)
//   parameters   a first step (zero moments) updates each element by a monotone function of its own clipped
//                gradient, so a gradient within its allowance, clipped by a coefficient from any norm within the
//                norm's, leaves θ′ between the updates at the interval's ends: a correct run's value lies in that
//                band (widened by the parameter's rounding, atol + rtol·|θ′|), whatever the oracle's own value is
//   expert bias  its update counts tokens (integers): the bias's rounding only
#pragma once

#include "compare/step_dump.hpp"

#include <map>
#include <string>

namespace moe::compare {

// Adds the grad norm and the parameters after the step to `c`, where the dump holds them. `oracle` is the golden
// model case's outputs for the dump (grad.<stem> whole, layer<l>.expert_bias_updated).
void compare_step_end(const StepDump& d, const std::map<std::string, formats::NpyArray>& oracle, StepComparison& c);

}  // namespace moe::compare
