// Independent tasks on a few threads: check's in-process runs, each a world of fiber ranks on one thread, run two
// at a time on two cores. Tasks are taken in index order and none is started after one has thrown; every task
// below a failing one has then been started and runs to its end, so the exception rethrown, the lowest-numbered
// task's, is the one a serial loop would have met first, whatever the timing.
//
// The workers share the OpenMP threads: each sets its own thread count (a per-thread setting) to its share, so two
// workers on two cores do not each start a team of two for every Eigen GEMM above its size threshold, on a
// machine already busy with the other worker (default check, median of 5: 3.3 s with full teams, 2.64 s shared).
#pragma once

#include <algorithm>
#include <atomic>
#include <exception>
#include <thread>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace moe::cli {

// The default number of jobs: one per hardware thread the process may use.
inline int hardware_jobs() { return std::max(1, int(std::thread::hardware_concurrency())); }

template <class Task>
void run_side_by_side(int tasks, int jobs, const Task& task) {
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(tasks));
  std::atomic<int> next{0};
  std::atomic<int> first_failure{tasks};  // the lowest-numbered task that threw so far
  const int workers = std::max(1, std::min(jobs, tasks));
#ifdef _OPENMP
  const int caller_threads = omp_get_max_threads();
  const int share = std::max(1, caller_threads / workers);
#endif
  auto worker = [&] {
#ifdef _OPENMP
    omp_set_num_threads(share);
#endif
    for (int t = next++; t < first_failure; t = next++) {
      try {
        task(t);
      } catch (...) {
        errors[std::size_t(t)] = std::current_exception();
        for (int f = first_failure; t < f && !first_failure.compare_exchange_weak(f, t);) {
        }
      }
    }
  };
  {
    std::vector<std::jthread> threads;
    for (int j = 1; j < workers; ++j) threads.emplace_back(worker);
    worker();
  }  // joins
#ifdef _OPENMP
  omp_set_num_threads(caller_threads);
#endif
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace moe::cli
