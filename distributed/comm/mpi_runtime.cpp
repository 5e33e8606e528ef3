#include "distributed/comm/mpi_runtime.hpp"

#include <mpi.h>

#include <cstdlib>
#include <exception>
#include <stdexcept>

namespace moe {

bool mpi_available() { return true; }

MpiRuntime::MpiRuntime(int& argc, char**& argv) : uncaught_at_start_(std::uncaught_exceptions()) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized || finalized) {
    throw std::logic_error("MpiRuntime: MPI was already initialised in this process (one MpiRuntime per process)");
  }
  int provided = 0;
  if (MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
    throw std::runtime_error("MpiRuntime: MPI_Init_thread failed");
  }
}

MpiRuntime::~MpiRuntime() {
  if (std::uncaught_exceptions() > uncaught_at_start_) abort(EXIT_FAILURE);
  MPI_Finalize();
}

void MpiRuntime::abort(int code) const {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::abort();  // MPI_Abort does not return; this keeps [[noreturn]] honest if it ever does
}

}  // namespace moe
