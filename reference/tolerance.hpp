// The one table of comparison tolerances, keyed by (what is compared, the precision it was computed in). Every
// comparison in the repository asks it: `check`, `golden verify` and the cases `golden write` makes, `compare`,
// the properties, the unit tests and the CUDA tests; docs/numerics.md gives each row's reason.
//
// A value passes when |got − want| ≤ atol + rtol·|want|, with `want` the reference; NaN and ±inf never pass.
#pragma once

#include <cmath>
#include <limits>
#include <string_view>

namespace moe {

// The arithmetic of the computation under test (the reference is double unless a row says otherwise).
enum class Precision { float64, float32, bfloat16 };
std::string_view to_string(Precision precision);  // "float64", "float32", "bfloat16"
Precision parse_precision(std::string_view name);   // the inverse; std::invalid_argument for another name

// What is compared, each with its reference.
enum class Compared {
  training_step,      // the parallel system's objective, gradients, expert bias, parameters and optimizer state
                      // (one step or a run) vs the global-step oracle: check, the properties, differential tests
  layer,              // one rank's MoE layer (its share of the tokens) vs the oracle's layer on the same tokens
  golden_case,        // a stored golden case vs the oracle (what `golden write` records in a new case)
  foreign_dump,       // another system's float64 dump vs the oracle (float32 and bf16: compare/error_model.hpp)
  device_kernel,      // a CUDA kernel vs the CPU kernel in the same type (bfloat16: CPU in double on rounded inputs)
  token_movement,     // dispatch → identity experts → combine vs Σ p·x: only the combine's sum reassociates
  finite_difference,  // an analytic derivative vs central differences with step 1e-6 (truncation error ~1e-8)
  muon_step,          // training_step under Muon: Newton–Schulz amplifies the input's rounding (see the table)
};
std::string_view to_string(Compared what);  // "training_step", "layer", … as the enumerators are spelled
Compared parse_compared(std::string_view name);

struct Tolerance {
  double atol = 0;
  double rtol = 0;

  bool admits(double got, double want) const;
  // |got − want| / (atol + rtol·|want|): ≤ 1 passes; +inf for a NaN or infinite got. Inline: comparisons call
  // it on every element of every tensor of every rank.
  double ratio(double got, double want) const {
    const double diff = std::abs(got - want);
    if (!std::isfinite(diff)) return std::numeric_limits<double>::infinity();
    const double allowed = atol + rtol * std::abs(want);
    if (allowed > 0) return diff / allowed;
    return diff == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  }
};

// Throws std::invalid_argument for a pair the table has no row for (e.g. a float golden case, or a float32
// foreign dump: compare's error model judges those).
Tolerance tolerance(Compared what, Precision precision);

}  // namespace moe
