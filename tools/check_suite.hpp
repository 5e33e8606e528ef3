// The main job's embedded default: the rows `moe-oracle check` runs with no arguments, and the features of the
// oracle each row exercises. Between them the rows run every option of the oracle, every parallel axis, every
// loss mode and every modelled semantics deviation, in a few seconds; check prints the coverage it measured.
#pragma once

#include "tools/run_options.hpp"

#include <set>
#include <string>
#include <vector>

namespace moe::cli {

// One row of the default set: a model and batch (with padding), its layouts, and optionally whole training steps.
struct CheckRow {
  std::string name;
  RunOptions run;
  std::vector<ParallelLayout> layouts;
  int steps = 0;          // 0: one step, gradients compared before any optimizer
  std::string resume_as{};  // with steps ≥ 2: save after steps/2 and continue under this layout
  bool distributed_optimizer = false;
  double clip_grad = 0;  // with steps: clip the global gradient norm to this (0: off)
  std::string optimizer = "adam";  // with steps: adam, muon or sgd
  std::string cp_comm_type = "all_gather";  // with attention: how keys and values cross the cp group (or p2p)
};

std::vector<CheckRow> default_rows();

// Every feature the coverage line can name, in print order.
const std::vector<std::string>& all_features();
// What one run of a row exercises: its model's options, loss mode, micro-batch, padding, layout axes, dispatcher,
// steps and the semantics deviations in effect. Only names from all_features().
std::set<std::string> features_of(const CheckRow& row, const ParallelLayout& layout, const std::string& dispatcher);

}  // namespace moe::cli
