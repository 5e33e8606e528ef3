// The processes and devices one `moe-oracle check` runs on, owned by one object: set up in order when it is made,
// torn down in the reverse order (the NCCL world before the MPI it was bootstrapped over) by close() where the check
// ends as it means to (its verdict, or an error it reported), or by the destructor where an exception escapes —
// there MpiRuntime ends the whole job (MPI_Abort), since the peers may be waiting in a collective.
//   inproc  nothing: every run's ranks are threads of this process;
//   mpi     MPI (mpirun's processes), one rank each;
//   nccl    the same processes (or this one alone, without MPI) with a GPU each and the collectives in NCCL, joined
//           by join_devices once every rank has seen the same options.
#pragma once

#include "cli/given_options.hpp"
#include "cli/kernel_choice.hpp"
#include "cli/rank_backend.hpp"
#include "distributed/comm/communicator.hpp"
#include "distributed/comm/mpi_communicator.hpp"
#include "distributed/comm/mpi_runtime.hpp"

#include <memory>
#include <string>
#include <vector>

namespace moe::cli {

class CheckJob {
 public:
  explicit CheckJob(Backend backend);
  CheckJob(const CheckJob&) = delete;
  CheckJob& operator=(const CheckJob&) = delete;
  ~CheckJob();

  // The MPI world (null without MPI) and whether this process prints (rank 0, or the only one).
  MpiCommunicator* world() const { return world_.get(); }
  bool prints() const { return !world_ || world_->rank() == 0; }
  // Before any work: every process must run one problem (the options it was given); with NCCL, the GPU ranks.
  void join(const std::vector<GivenOption>& given);
  // Where the runs' ranks live: the NCCL world, the MPI world, or null (in process).
  Communicator* ranks() const { return devices_.world ? devices_.world.get() : world_.get(); }
  int device() const { return devices_.device; }
  // The report's backend: with NCCL, how many ranks (a GPU each) the job had.
  std::string label() const;
  // An error on this rank: said on stderr with the rank, and the whole job ended (exit 2) where it has peers.
  void end_on_error(const std::string& what) const;
  // NCCL, then MPI (MPI_Finalize); call before the exit status is thrown. Idempotent.
  void close();

 private:
  Backend backend_;
  std::unique_ptr<MpiRuntime> mpi_;
  std::unique_ptr<MpiCommunicator> world_;
  std::unique_ptr<Communicator> alone_;  // --backend nccl without MPI: the bootstrap of a job of one process
  DeviceRanks devices_;                  // --backend nccl: the job's ranks on their GPUs
};

}  // namespace moe::cli
