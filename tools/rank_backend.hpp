// --backend: where the ranks of a run live, as threads of this process (inproc) or as the processes of an mpirun job
// (mpi). `check` and `bench` take it.
#pragma once

#include "reference/named.hpp"

#include <span>

namespace moe::cli {

enum class Backend { inproc, mpi };
inline constexpr Named<Backend> kBackendNames[] = {{Backend::inproc, "inproc"}, {Backend::mpi, "mpi"}};
constexpr std::span<const Named<Backend>> names_of(Backend) { return kBackendNames; }

}  // namespace moe::cli
