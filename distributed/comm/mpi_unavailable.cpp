// Built instead of the MPI backend when CMake finds no MPI (e.g. a GPU machine with only the CUDA toolkit): the
// backend's entry points exist and refuse with one message, so everything else builds and runs on in-process
// ranks, and `--backend mpi` says what is missing rather than failing to link.
#include "distributed/comm/mpi_baseline.hpp"
#include "distributed/comm/mpi_communicator.hpp"
#include "distributed/comm/mpi_runtime.hpp"

#include <stdexcept>

namespace moe {
namespace {

[[noreturn]] void unavailable() {
  throw std::runtime_error(
      "this build has no MPI backend: install Open MPI (libopenmpi-dev, openmpi-bin) and rebuild, or use in-process "
      "ranks");
}

}  // namespace

bool mpi_available() { return false; }

MpiRuntime::MpiRuntime(int&, char**&) : uncaught_at_start_(0) { unavailable(); }
MpiRuntime::~MpiRuntime() = default;
void MpiRuntime::abort(int) const { unavailable(); }

struct MpiCommunicator::State {};
MpiCommunicator::MpiCommunicator(const MpiRuntime&) { unavailable(); }
MpiCommunicator::~MpiCommunicator() = default;
int MpiCommunicator::rank() const { unavailable(); }
int MpiCommunicator::size() const { unavailable(); }
void MpiCommunicator::run_collective(const CollectiveCall&, const void*, void*) { unavailable(); }
std::unique_ptr<Communicator> MpiCommunicator::run_split(const CollectiveCall&) { unavailable(); }
void MpiCommunicator::send_bytes(ElementType, const void*, std::int64_t, int, int) { unavailable(); }
void MpiCommunicator::recv_bytes(ElementType, void*, std::int64_t, int, int) { unavailable(); }

std::vector<double> time_raw_alltoallv(const std::vector<std::int64_t>&, const std::vector<std::int64_t>&, int) {
  unavailable();
}

}  // namespace moe
