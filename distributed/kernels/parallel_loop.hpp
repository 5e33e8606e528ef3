// A loop over independent indices, on an OpenMP team only when it is worth one.
//
// Why not `#pragma omp parallel for if (worth)`: libgomp enters the region even when its if-clause is false or
// the team would have one thread, and ends it with a futex wake (a system call). `moe-oracle check` runs each
// world of in-process ranks on one thread with a share of one OpenMP thread, and its tiny kernels crossed ~96,000
// such regions per default check, every one a syscall that did no parallel work.
#pragma once

#include <cstdint>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace moe::kernels {

enum class Schedule { equal_chunks, dynamic };  // OpenMP's schedule(static) and schedule(dynamic)

// body(i) for every i in [0, n): on a team when `worth` and the calling thread may use more than one thread,
// else in order on the calling thread. Every body(i) must write only what no other index writes.
template <class Body>
void parallel_loop(std::int64_t n, bool worth, Schedule schedule, const Body& body) {
#ifdef _OPENMP
  if (worth && omp_get_max_threads() > 1) {
    if (schedule == Schedule::dynamic) {
#pragma omp parallel for schedule(dynamic)
      for (std::int64_t i = 0; i < n; ++i) body(i);
    } else {
#pragma omp parallel for schedule(static)
      for (std::int64_t i = 0; i < n; ++i) body(i);
    }
    return;
  }
#endif
  for (std::int64_t i = 0; i < n; ++i) body(i);
}

}  // namespace moe::kernels
