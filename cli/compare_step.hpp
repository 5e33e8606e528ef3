// `moe-oracle compare DIR` on a step dump (format moe-step/1, compare/step_dump.hpp): every rank's reduced
// gradients against the oracle's global step. Exit 0 when every gradient passes, 1 naming the first mismatch (and
// each parameter class one factor explains, with the factor and the ranks), 2 when the dump is refused.
#pragma once

#include "reference/tolerance.hpp"

#include <optional>
#include <string>

namespace moe::cli {

// semantics: empty for the dump's claim; precision: unset for the files' (float64).
void run_compare_step(const std::string& dir, const std::string& semantics, std::optional<Precision> precision,
                      bool json);

}  // namespace moe::cli
