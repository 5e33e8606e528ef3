#include "cli/check/check_job.hpp"

#include "cli/rank_error.hpp"
#include "distributed/comm/inproc_world.hpp"
#include "distributed/comm/option_agreement.hpp"

#include <cstdlib>
#include <stdexcept>

namespace moe::cli {
namespace {

// A build without MPI cannot join the processes of an mpirun job: refuse rather than run N separate jobs.
void require_one_process(const std::string& what) {
  for (const char* variable : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"}) {
    const char* value = std::getenv(variable);
    if (value != nullptr && std::atoi(value) > 1)
      throw std::invalid_argument(what + ": this build has no MPI backend, so the " + value + " processes the "
                                  "launcher started ($" + variable + ") cannot join one NCCL world (install Open MPI "
                                  "and rebuild, or run one process)");
  }
}

}  // namespace

CheckJob::CheckJob(Backend backend) : backend_(backend) {
  // NCCL's ranks are bootstrapped over MPI; a build without MPI runs them as a job of one process.
  if (backend == Backend::mpi || (backend == Backend::nccl && mpi_available())) {
    int argc = 0;
    char** argv = nullptr;
    mpi_ = std::make_unique<MpiRuntime>(argc, argv);
    world_ = std::make_unique<MpiCommunicator>(*mpi_);
  }
}

CheckJob::~CheckJob() { close(); }

void CheckJob::close() {
  devices_.world.reset();  // NCCL goes before the MPI it was bootstrapped over
  alone_.reset();
  world_.reset();
  mpi_.reset();
}

void CheckJob::join(const std::vector<GivenOption>& given) {
  if (world_) require_same_options(*world_, given);
  if (backend_ != Backend::nccl) return;
  if (!world_) {
    require_one_process("--backend nccl");
    alone_ = single_rank_communicator();
  }
  devices_ = join_device_ranks(world_ ? *world_ : *alone_);
}

std::string CheckJob::label() const {
  std::string label(name_of(backend_));
  if (backend_ == Backend::nccl && world_)
    label += " (" + std::to_string(world_->size()) + (world_->size() == 1 ? " rank" : " ranks") + ", one GPU each)";
  return label;
}

void CheckJob::end_on_error(const std::string& what) const {
  if (mpi_ && world_) end_job_on_error(*mpi_, *world_, what);
}

}  // namespace moe::cli
