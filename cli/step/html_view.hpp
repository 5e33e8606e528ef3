// The picture view of a Trace (`moe-oracle step --html FILE`): one self-contained page (inline CSS, JS and SVG, no
// external assets) with a band per stage, ranks as columns, rows as chips coloured by the rank their token lives
// on, and arrows from the previous stage's chips wherever rows crossed ranks. The page draws itself from the
// trace's JSON (json_view.hpp); when it has drawn every stage it sets its title to "moe-step: ok, N stages",
// and on a script error to "moe-step: error …", which the headless-browser test reads.
#pragma once

#include "cli/step/step_trace.hpp"

#include <optional>
#include <ostream>
#include <vector>

namespace moe::step {

// With `rank`, only that rank's column is drawn (arrows then show the rows that stay on it).
void write_html(const Trace& trace, const std::vector<size_t>& stages, std::optional<int> rank, std::ostream& out);

}  // namespace moe::step
