// --backend: where the ranks of a run live, as threads of this process (inproc), as the processes of an mpirun job
// (mpi), or as those processes with a GPU each and their collectives in NCCL (nccl: `check` only; cuda/nccl_world.hpp).
// `check` and `bench` take it.
#pragma once

#include "reference/named.hpp"

#include <span>

namespace moe::cli {

enum class Backend { inproc, mpi, nccl };
inline constexpr Named<Backend> kBackendNames[] = {
    {Backend::inproc, "inproc"}, {Backend::mpi, "mpi"}, {Backend::nccl, "nccl"}};
constexpr std::span<const Named<Backend>> names_of(Backend) { return kBackendNames; }

}  // namespace moe::cli
