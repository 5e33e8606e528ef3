#include "proptests/differential.hpp"

#include <rapidcheck.h>

#include <sstream>

namespace moe::proptest {

std::string report(const dist::RankComparison& r) {
  std::ostringstream os;
  os.precision(17);
  if (r.failed)
    os << "first mismatch: " << r.first.tensor << " on rank " << r.first.rank << " at " << r.first.index
       << ": got " << r.first.got << ", want " << r.first.want << "\n";
  for (int q = 0; q < dist::kQuantities; ++q) {
    const auto& e = r.errors[static_cast<size_t>(q)];
    if (e.compared > 0)
      os << "  " << dist::to_string(static_cast<dist::Quantity>(q)) << ": max |diff| " << e.max_abs
         << ", max diff/tolerance " << e.max_ratio << " over " << e.compared << " values\n";
  }
  return os.str();
}

void require_oracle_match(const dist::CheckProblem& problem, const GlobalStep& oracle, const std::string& what) {
  const dist::RankComparison r = dist::check_inproc(problem, oracle);
  if (!r.pass()) RC_FAIL(what + " (" + std::string(dist::to_string(problem.options.dispatcher)) + ", " +
                         std::string(to_string(problem.options.mode)) + ") differs from the oracle; " + report(r));
  RC_ASSERT(r.errors[static_cast<size_t>(dist::Quantity::objective)].compared > 0);
}

}  // namespace moe::proptest
