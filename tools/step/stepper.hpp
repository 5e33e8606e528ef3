// Runs a StepProblem on in-process ranks (one thread each) through the real router, dispatcher and grouped SwiGLU,
// forward and backward, and returns every stage of every rank as a Trace. Provenance comes from a second walk of
// the same dispatcher on tag rows (tools/step/provenance.hpp). The stepped output and input gradient are compared
// with the oracle (moe_forward / moe_backward) on the same batch.
#pragma once

#include "distributed/dispatch/dispatcher.hpp"
#include "tools/step/step_problem.hpp"
#include "tools/step/step_trace.hpp"

namespace moe::step {

Trace run_step(const StepProblem& problem, dist::DispatcherKind dispatcher);

}  // namespace moe::step
