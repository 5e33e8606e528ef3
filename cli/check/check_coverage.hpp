// What the main job's runs exercise: every feature of the oracle the coverage line can name, and the features one
// run of a row exercises. Each feature is one entry of one table (check_coverage.cpp): its name and its test.
#pragma once

#include "cli/check/check_suite.hpp"

#include <set>
#include <string>
#include <vector>

namespace moe::cli {

// Every feature the coverage line can name, in print order.
const std::vector<std::string>& all_features();
// What one run of a row exercises: its model's options, loss mode, micro-batch, padding, layout axes, dispatcher,
// steps and the semantics deviations in effect. Only names from all_features().
std::set<std::string> features_of(const CheckRow& row, const ParallelLayout& layout, dist::DispatcherKind dispatcher);

}  // namespace moe::cli
