// MPI's lifetime as an object: one per process, created first in main and destroyed last.
//
//   int main(int argc, char** argv) {
//     moe::MpiRuntime mpi(argc, argv);
//     moe::MpiCommunicator world(mpi);
//     ...
//   }
//
// MPI can be initialised once per process, so a second MpiRuntime (even after the first is gone) throws. If the
// runtime is destroyed by an exception unwinding the stack, it calls MPI_Abort rather than MPI_Finalize: the other
// processes may be waiting in a collective this one will never join, and only an abort stops them.
#pragma once

namespace moe {

// Whether this build has the MPI backend (false where CMake found no MPI: mpi_unavailable.cpp).
bool mpi_available();

class MpiRuntime {
 public:
  MpiRuntime(int& argc, char**& argv);  // MPI_Init_thread, funneled (OpenMP inside a rank is fine)
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;
  ~MpiRuntime();

  // Stops every process of the job with this exit code.
  [[noreturn]] void abort(int code) const;

 private:
  int uncaught_at_start_;
};

}  // namespace moe
