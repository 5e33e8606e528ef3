// What `moe-oracle check` reports of its runs: the table (one per row, with each training run's trajectory, the
// first mismatch of every failed run and, for the default set, the features it covered), the same as JSON, and JUnit
// XML for CI systems.
#pragma once

#include "cli/check/check_suite.hpp"
#include "distributed/check/differential_check.hpp"

#include <nlohmann/json.hpp>

#include <ostream>
#include <string>
#include <vector>

namespace moe::cli {

// One (row, layout, dispatcher) run and its comparison with the oracle.
struct CheckRun {
  const CheckRow* row;
  ParallelLayout layout;
  dist::DispatcherKind dispatcher;
  dist::RankComparison result;                // merged over the steps
  double seconds = 0;
  std::vector<dist::RankComparison> steps{};  // one per training step (rows with steps)
  Tolerance tolerance{};                      // what the run passed or failed by (a bf16 or Muon row's own)
  int replica_slots = 0;                      // replicated hot experts: the slots the plans used, over the layers
  bool in_process = false;  // --backend nccl, a layout wider than the job: ran on in-process ranks of rank 0
  // What the run was given, taken from the problem the parallel system and the oracle ran (not from the row), so
  // that the report, and the tests reading it, see a row whose settings were lost on the way.
  ModelConfig model{};
  Precision precision = Precision::float64;
  LossMode mode = LossMode::sum;
};

// What the report says about how the runs were made.
struct ReportSettings {
  std::string backend, kernels, dtype;
  double atol = 0, rtol = 0;
  bool tolerance_given = false;     // else bf16 rows that pass at their own tolerance say so
  std::vector<std::string> notes;   // what was chosen for the user
  bool default_set = false;         // the embedded default, unfiltered: print the coverage line
};

// An error or a tolerance as the report prints it: one digit, "%.1e".
std::string one_digit(double v);

// The name a run is filtered and reported by: "tiny-v4 sum b1 [intended] w4 tp1 … alltoall".
std::string run_name(const CheckRow& row, const ParallelLayout& layout, dist::DispatcherKind kind);

void print_report(const std::vector<CheckRun>& runs, const ReportSettings& settings, std::ostream& out);
nlohmann::json report_json(const std::vector<CheckRun>& runs, const ReportSettings& settings);
// One testcase per run (classname the row, name the layout and dispatcher), the first mismatch as the failure's
// message. Throws std::invalid_argument when `path` cannot be written.
void write_junit(const std::vector<CheckRun>& runs, const std::string& path);

}  // namespace moe::cli
