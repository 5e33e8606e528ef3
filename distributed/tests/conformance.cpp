#include "distributed/tests/conformance.hpp"

#include "distributed/tests/conformance_support.hpp"

#include <chrono>
#include <exception>

namespace moe::conformance {

std::vector<Case> cases(int size) {
  std::vector<Case> all;
  add_collective_cases(all, size);
  add_group_cases(all, size);
  add_point_to_point_cases(all, size);
  add_error_cases(all, size);
  add_row_exchange_cases(all, size);
  return all;
}

std::vector<CaseResult> run_conformance(Communicator& comm, std::string_view prefix) {
  std::vector<CaseResult> results;
  for (const Case& c : cases(comm.size())) {
    if (!c.name.starts_with(prefix)) continue;
    const auto start = std::chrono::steady_clock::now();
    Tally tally;
    std::string error;
    try {
      tally = c.run(comm);
    } catch (const std::exception& e) {
      tally = Tally{1, 1};
      error = e.what();
    }
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    results.push_back({c.name, tally, elapsed.count(), error});
  }
  return results;
}

}  // namespace moe::conformance
