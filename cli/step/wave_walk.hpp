// `moe-oracle step --expert-waves W`: the stepped batch once more through wave-scheduled EP
// (distributed/train/expert_waves.hpp), on rank threads with each rank's computes on its worker thread. It shows
// which experts each wave holds, the rows each wave moves on each rank, the program every rank runs (what its own
// thread does while the worker computes), when each stage ran, and whether the output and input gradient are the
// unwaved AlltoAll run's bit for bit.
#pragma once

#include "cli/step/step_problem.hpp"
#include "distributed/train/expert_waves.hpp"

#include <nlohmann/json.hpp>

#include <ostream>
#include <vector>

namespace moe::step {

struct WaveRank {
  int rank = 0;
  std::vector<std::int64_t> expert_rows;  // [W] rows at this rank's experts in each wave
  std::vector<std::int64_t> source_rows;  // [W] rows of this rank's tokens back from each wave's combine
  dist::WaveTimeline forward, backward;   // when each stage ran (µs from the start of the pass)
};

struct WaveTrace {
  int waves = 0, local_experts = 0;
  std::vector<std::vector<int>> wave_experts;  // [W] the global experts of each wave
  std::vector<dist::WaveStep> schedule;        // every rank's program
  std::vector<WaveRank> ranks;
  double max_abs_y = 0, max_abs_grad_x = 0;    // against the unwaved AlltoAll run (0: bit for bit)
  bool bitwise() const { return max_abs_y == 0 && max_abs_grad_x == 0; }
};

// Throws std::invalid_argument when the waves do not fit (2 ≤ W ≤ local experts per rank).
WaveTrace run_waves(const StepProblem& problem, int waves);

void print_waves(const WaveTrace& trace, std::ostream& out);
nlohmann::json waves_json(const WaveTrace& trace);

}  // namespace moe::step
