// The step of the parallel system against the oracle, as a property sees it: run, compare, and on a mismatch
// fail with the quantity errors and the first differing element (tensor, rank, index, got, want).
#pragma once

#include "proptests/scenario.hpp"

#include <string>

namespace moe::proptest {

std::string report(const dist::RankComparison& r);

// Runs the problem's step on in-process ranks and fails the property (RC_FAIL) unless every rank matches
// `oracle`; `what` names the run in the message (e.g. "avg against the sum oracle").
void require_oracle_match(const dist::CheckProblem& problem, const GlobalStep& oracle, const std::string& what);

// Runs both problems' steps on in-process ranks (the same layout) and fails the property unless every rank's
// objective and every synchronised gradient tensor are bitwise equal; `what` names the pair in the message.
void require_bitwise_equal(const dist::CheckProblem& a, const dist::CheckProblem& b, const std::string& what);

}  // namespace moe::proptest
