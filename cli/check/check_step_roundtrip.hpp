// The main job's view of compare on a step dump (moe-step/1): the parallel system's whole training step on
// in-process ranks (dist::train_step: microbatches, gradient synchronisation) written out as each rank's reduced
// gradients beside the step's inputs, as tools/megatron-check's step driver writes Megatron's, and judged by
// compare against the oracle's global step. Two layouts pass; a control scales every expert gradient by 2 and must
// fail with the experts named as that factor, another leaves one rank's expert gradient out and must be refused.
#pragma once

#include "cli/check/check_compare_roundtrip.hpp"

#include <filesystem>
#include <vector>

namespace moe::cli {

std::vector<RoundTrip> step_round_trips(const std::filesystem::path& scratch);

}  // namespace moe::cli
