#include "distributed/comm/mpi_baseline.hpp"

#include <mpi.h>

#include <numeric>
#include <stdexcept>

namespace moe {
namespace {

std::vector<int> as_int(const std::vector<std::int64_t>& v) {
  std::vector<int> out;
  for (auto x : v) {
    if (x > 0x7fffffff) throw std::invalid_argument("raw alltoallv: a block exceeds 2 GiB");
    out.push_back(static_cast<int>(x));
  }
  return out;
}

std::vector<int> displacements(const std::vector<int>& counts) {
  std::vector<int> d(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) d[i] = d[i - 1] + counts[i - 1];
  return d;
}

}  // namespace

std::vector<double> time_raw_alltoallv(const std::vector<std::int64_t>& send_bytes,
                                       const std::vector<std::int64_t>& recv_bytes, int repetitions) {
  const std::vector<int> sc = as_int(send_bytes), rc = as_int(recv_bytes);
  const std::vector<int> sd = displacements(sc), rd = displacements(rc);
  std::vector<char> send(static_cast<size_t>(std::accumulate(sc.begin(), sc.end(), 0LL)), 1);
  std::vector<char> recv(static_cast<size_t>(std::accumulate(rc.begin(), rc.end(), 0LL)));
  std::vector<double> seconds;
  for (int r = -1; r < repetitions; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double start = MPI_Wtime();
    MPI_Alltoallv(send.data(), sc.data(), sd.data(), MPI_BYTE, recv.data(), rc.data(), rd.data(), MPI_BYTE,
                  MPI_COMM_WORLD);
    double elapsed = MPI_Wtime() - start;
    MPI_Allreduce(MPI_IN_PLACE, &elapsed, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (r >= 0) seconds.push_back(elapsed);
  }
  return seconds;
}

}  // namespace moe
