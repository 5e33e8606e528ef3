// A command's error on one rank of an mpirun job. The other ranks may wait in a collective this one will never
// join, so only an abort ends the job, and an abort must not swallow the reason: the rank says it first (every
// rank that fails says it), then ends the job with status 2. Alone (no mpirun) no one waits, so it returns and
// the caller ends MPI normally before failing with status 2.
#pragma once

#include "distributed/comm/communicator.hpp"
#include "distributed/comm/mpi_runtime.hpp"

#include <iostream>
#include <string>

namespace moe::cli {

inline void end_job_on_error(const MpiRuntime& mpi, const Communicator& world, const std::string& what) {
  std::cerr << "moe-oracle: error on rank " + std::to_string(world.rank()) + " of " + std::to_string(world.size()) +
                   ": " + what + "\n"
            << std::flush;
  if (world.size() > 1) mpi.abort(2);
}

}  // namespace moe::cli
