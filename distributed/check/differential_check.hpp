// The differential check: run one training step of the parallel system on every rank of a world and compare
// each rank with the global step oracle. The same code runs on in-process ranks and under mpirun.
#pragma once

#include "distributed/check/oracle_comparison.hpp"
#include "distributed/comm/communicator.hpp"
#include "distributed/train/rank_trainer.hpp"
#include "distributed/train/train_step.hpp"
#include "reference/global_step.hpp"

#include <optional>
#include <string>
#include <vector>

namespace moe::dist {

struct CheckProblem {
  ModelConfig config;
  ModelParams<double> params;
  GlobalBatch batch;
  ParallelLayout layout;
  StepOptions options;
  Tolerance tolerance = moe::tolerance(Compared::training_step, Precision::float64);
};

// The oracle's answer for the problem (global_step over the problem's layout split).
GlobalStep oracle_step(const CheckProblem& problem);

// The problem's step as this rank of `world` runs it (groups: ProcessGroups(problem.layout)). Collective.
RankStep step_on_world(Communicator& world, const CheckProblem& problem, const ProcessGroups& groups);

// Collective over `world`: every rank returns the comparison merged over all ranks.
RankComparison check_on_world(Communicator& world, const CheckProblem& problem, const GlobalStep& oracle);

// Runs check_on_world on in-process ranks.
RankComparison check_inproc(const CheckProblem& problem, const GlobalStep& oracle);

// Several whole training steps (optimizer and bias update included), optionally saved halfway and resumed from
// the checkpoint under another layout.
struct RunProblem {
  ModelConfig config;
  ModelParams<double> params;
  std::vector<GlobalBatch> batches;  // one per step
  ParallelLayout layout;
  StepOptions options;
  OptimizerSettings optimizer;
  Tolerance tolerance = moe::tolerance(Compared::training_step, Precision::float64);
  std::optional<ParallelLayout> resume_as;  // save after steps/2 under `layout`, continue under this one
  std::string checkpoint_dir;               // where (required with resume_as)
};

// The oracle's uninterrupted trajectory for the run: `layout`'s split, then resume_as's from the same state.
std::vector<TrajectoryPoint> oracle_trajectory(const RunProblem& problem);

// One comparison per step, merged over the ranks. Collective over `world` (at least as many ranks as the larger
// layout; the others wait).
std::vector<RankComparison> check_run_on_world(Communicator& world, const RunProblem& problem,
                                               const std::vector<TrajectoryPoint>& oracle);
std::vector<RankComparison> check_run_inproc(const RunProblem& problem, const std::vector<TrajectoryPoint>& oracle);

}  // namespace moe::dist
