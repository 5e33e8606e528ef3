// What each stage of each dispatcher is and why it exists, in the seed's words: the text `moe-oracle step` prints
// above every buffer. Every stage a dispatcher reports must be described here (a missing one is an error), so the
// explanations cannot silently fall behind the code.
#pragma once

#include "cli/step/step_trace.hpp"
#include "distributed/dispatch/dispatcher.hpp"

#include <string>

namespace moe::step {

// A Stage with id, phase, name, kind, title, why, shape and transfer filled in and no ranks yet.
// Throws std::logic_error for a stage the catalogue does not know.
Stage catalogue_stage(dist::DispatcherKind kind, const std::string& phase, const std::string& name, bool is_counts);

}  // namespace moe::step
