// Independent tasks on a few threads: check's in-process runs, each a world of fiber ranks on one thread, run two
// at a time on two cores. Tasks are taken in index order and none is started after one has thrown; every task
// below a failing one has then been started and runs to its end, so the exception rethrown, the lowest-numbered
// task's, is the one a serial loop would have met first, whatever the timing.
#pragma once

#include <algorithm>
#include <atomic>
#include <exception>
#include <thread>
#include <vector>

namespace moe::cli {

// The default number of jobs: one per hardware thread the process may use.
inline int hardware_jobs() { return std::max(1, int(std::thread::hardware_concurrency())); }

template <class Task>
void run_side_by_side(int tasks, int jobs, const Task& task) {
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(tasks));
  std::atomic<int> next{0};
  std::atomic<int> first_failure{tasks};  // the lowest-numbered task that threw so far
  auto worker = [&] {
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
    for (int j = 1; j < std::min(jobs, tasks); ++j) threads.emplace_back(worker);
    worker();
  }  // joins
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace moe::cli
