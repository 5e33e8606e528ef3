// The practical peak a dispatcher is measured against: the raw MPI_Alltoallv of the same bytes on
// MPI_COMM_WORLD, with no argument checks or metadata (only this file and the MPI backend include mpi.h).
#pragma once

#include <cstdint>
#include <vector>

namespace moe {

// Collective over MPI_COMM_WORLD (MPI must be initialised): sends send_bytes[j] bytes to rank j and receives
// recv_bytes[j] from rank j, `repetitions` times after one warm-up; returns each repetition's seconds, the
// slowest rank's (MPI_MAX over ranks).
std::vector<double> time_raw_alltoallv(const std::vector<std::int64_t>& send_bytes,
                                       const std::vector<std::int64_t>& recv_bytes, int repetitions);

}  // namespace moe
