// The human view of a Trace: a header (layout, which experts each rank holds, how the example was built), then one
// block per stage with the ranks side by side, every row with its provenance label, probability and first values.
#pragma once

#include "cli/step/step_trace.hpp"

#include <optional>
#include <ostream>

namespace moe::step {

struct TextOptions {
  std::optional<int> rank;  // follow one rank only
  int max_values = 4;       // values printed per row
};

void print_header(const Trace& trace, std::ostream& out);
// Stage `index` of trace.stages, numbered among `count` stages as `[number/count]`.
void print_stage(const Trace& trace, size_t index, size_t number, size_t count, const TextOptions& options,
                 std::ostream& out);
void print_oracle(const Trace& trace, std::ostream& out);

}  // namespace moe::step
