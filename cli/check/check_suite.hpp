// The main job's embedded default: the rows `moe-oracle check` runs with no arguments (the features each exercises:
// check_coverage.hpp). Between them the rows run every option of the oracle, every parallel axis, every
// loss mode and every modelled semantics deviation, in a few seconds; check prints the coverage it measured.
#pragma once

#include "cli/run_options.hpp"
#include "distributed/dispatch/dispatcher.hpp"
#include "distributed/train/cp_attention.hpp"
#include "reference/tolerance.hpp"
#include "reference/trajectory.hpp"

#include <string>
#include <utility>
#include <vector>

namespace moe::cli {

// What a row runs besides its model and layouts. Each default row has its own; a flag of `check` (check_rows.hpp)
// sets one of them for every row.
struct RowSettings {
  int steps = 0;                 // 0: one step, gradients compared before any optimizer
  std::string resume_as{};       // with steps ≥ 2: save after steps/2 and continue under this layout
  bool distributed_optimizer = false;
  double clip_grad = 0;          // with steps: clip the global gradient norm to this (0: off)
  OptimizerKind optimizer = OptimizerKind::adam;              // with steps
  dist::KvExchange cp_comm_type = dist::KvExchange::all_gather;  // with attention: how keys and values cross cp
  int hot_expert_slots = 0;      // replicated hot experts: replica slots per layer (ETP 1)
  int expert_waves = 1;          // wave-scheduled EP: the routed experts in this many waves (AlltoAll only)
};

// One row of the default set: a model and batch (with padding), its layouts, and what it runs on them.
struct CheckRow : RowSettings {
  CheckRow(std::string row_name, RunOptions row_run, std::vector<ParallelLayout> row_layouts,
           RowSettings settings = {})
      : RowSettings(std::move(settings)), name(std::move(row_name)), run(std::move(row_run)),
        layouts(std::move(row_layouts)) {}
  std::string name;
  RunOptions run;
  std::vector<ParallelLayout> layouts;
};

std::vector<CheckRow> default_rows();

// How a row is named in the report: "tiny-v4 sum b1", with its steps, optimizer, clipping and resume.
std::string row_label(const CheckRow& row);
// A row with bf16 storage runs in float where the parallel system can, and in double where it cannot yet: whole
// training steps (the optimizer keeps double state), FP8 dispatch (in float a last-bit difference can cross an
// e4m3 boundary) and attention (the CPU system runs it in double).
bool bf16_in_double(const CheckRow& row);
// The tolerance of a bf16 row (check_suite.cpp says why it is the double one when the row runs in double).
Tolerance bf16_row_tolerance(const CheckRow& row);

}  // namespace moe::cli
