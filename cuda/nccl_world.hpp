// The ranks of a job as NCCL ranks, one GPU each, for `moe-oracle check --backend nccl` (docs/cli.md):
//   1. every rank learns its place among the ranks on its host (an allgather of host ids over the bootstrap);
//   2. it takes the GPU of that number (device_for_rank); more ranks on a host than visible GPUs are refused, since
//      NCCL takes one GPU per rank. A rank that sees one GPU takes it (a launcher may give each rank its own
//      through CUDA_VISIBLE_DEVICES; where two ranks share it after all, NCCL refuses: "Duplicate GPU detected");
//   3. rank 0's NCCL id goes to every rank over the bootstrap, and they join one NCCL communicator;
//   4. the world the parallel system runs on is a DeviceStagedCommunicator: host buffers in, collectives in NCCL on
//      device buffers, point-to-point over the bootstrap.
// Steps 1 and 2 are plain functions (tested on the CPU); 3 and 4 need a GPU and a build with NCCL, and say which is
// missing otherwise.
#pragma once

#include "distributed/comm/communicator.hpp"

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace moe::cuda {

// For each rank, how many lower ranks share its host id: its local rank.
std::vector<int> local_ranks(std::span<const std::int64_t> host_ids);

// The CUDA device of a rank that is `local_rank`-th on a host with `visible` GPUs. Throws std::invalid_argument
// (naming `host`) when the host has no GPU, or several but fewer than its ranks.
int device_for_rank(int local_rank, int ranks_on_host, int visible, const std::string& host);

struct NcclWorld {
  int device = 0;                        // this rank's GPU
  std::unique_ptr<Communicator> world;   // host-facing; collectives in NCCL
};

// Collective over `bootstrap` (the MPI world, or one rank alone); `bootstrap` must outlive the result.
NcclWorld join_nccl_world(Communicator& bootstrap);

}  // namespace moe::cuda
