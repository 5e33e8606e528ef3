// The differential check: run one training step of the parallel system on every rank of a world and compare
// each rank with the global step oracle. The same code runs on in-process ranks and under mpirun.
#pragma once

#include "distributed/communicator.hpp"
#include "distributed/oracle_comparison.hpp"
#include "distributed/train_step.hpp"
#include "reference/global_step.hpp"

namespace moe::dist {

struct CheckProblem {
  ModelConfig config;
  ModelParams<double> params;
  GlobalBatch batch;
  ParallelLayout layout;
  StepOptions options;
  Tolerance tolerance;
};

// The oracle's answer for the problem (global_step over the problem's layout split).
GlobalStep oracle_step(const CheckProblem& problem);

// Collective over `world`: every rank returns the comparison merged over all ranks.
RankComparison check_on_world(Communicator& world, const CheckProblem& problem, const GlobalStep& oracle);

// Runs check_on_world on in-process ranks.
RankComparison check_inproc(const CheckProblem& problem, const GlobalStep& oracle);

}  // namespace moe::dist
