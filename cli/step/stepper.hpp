// Runs a StepProblem on in-process ranks (one thread each) through the real router, dispatcher and grouped SwiGLU,
// forward and backward, and returns every stage of every rank as a Trace. Provenance comes from a second walk of
// the same dispatcher on tag rows (cli/step/provenance.hpp). The stepped output and input gradient are compared
// with the oracle (moe_forward / moe_backward) on the same batch.
#pragma once

#include "cli/step/step_problem.hpp"
#include "cli/step/step_trace.hpp"
#include "distributed/dispatch/dispatcher.hpp"

namespace moe::step {

Trace run_step(const StepProblem& problem, dist::DispatcherKind dispatcher);

}  // namespace moe::step
