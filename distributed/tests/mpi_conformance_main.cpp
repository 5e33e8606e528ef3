// The conformance body under mpirun: every process runs all cases on an MpiCommunicator over the world; rank 0
// prints one line per case (nccl-tests style: elements checked, #wrong summed over ranks, time) and the exit
// status is non-zero if any element is wrong. The tallies are summed with plain MPI, not with the
// communicator under test.
//   mpirun -np 8 --oversubscribe mpi_conformance
#include "distributed/comm/mpi_communicator.hpp"
#include "distributed/comm/mpi_runtime.hpp"
#include "distributed/tests/conformance.hpp"

#include <mpi.h>

#include <cstdio>
#include <exception>
#include <optional>
#include <vector>

namespace {

int report(const std::vector<moe::conformance::CaseResult>& results, int rank, int size) {
  std::vector<std::int64_t> local, total(2 * results.size());
  for (const auto& r : results) {
    local.push_back(r.tally.checked);
    local.push_back(r.tally.wrong);
  }
  MPI_Reduce(local.data(), total.data(), int(local.size()), MPI_INT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
  int failed = 0;
  if (rank == 0) {
    std::printf("# conformance on %d MPI ranks\n# %-40s %10s %7s %9s\n", size, "case", "checked", "#wrong", "ms");
    for (std::size_t c = 0; c < results.size(); ++c) {
      const std::int64_t wrong = total[2 * c + 1];
      failed += wrong != 0 || total[2 * c] == 0 ? 1 : 0;
      std::printf("  %-40s %10lld %7lld %9.3f%s\n", results[c].name.c_str(), static_cast<long long>(total[2 * c]),
                  static_cast<long long>(wrong), results[c].seconds * 1e3, wrong != 0 ? "  FAIL" : "");
    }
    std::printf("# %zu cases, %d failed\n", results.size(), failed);
  }
  MPI_Bcast(&failed, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return failed;
}

}  // namespace

int main(int argc, char** argv) {
  moe::MpiRuntime mpi(argc, argv);
  // Outside the try block, so that on an error MPI_Abort runs before the communicator's destructor would wait
  // for sends that will never be received.
  std::optional<moe::MpiCommunicator> world;
  int failed = 0;
  try {
    world.emplace(mpi);
    failed = report(moe::conformance::run_conformance(*world), world->rank(), world->size());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mpi_conformance: %s\n", e.what());
    mpi.abort(2);
  }
  return failed == 0 ? 0 : 1;
}
