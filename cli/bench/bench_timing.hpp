// Timing helpers shared by the benchmarks of `moe-oracle bench`: a monotonic clock in seconds, the median, and the
// machine's practical GEMM peak in this run.
#pragma once

#include "reference/random_init.hpp"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <vector>

namespace moe::cli {

inline double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

inline double median(std::vector<double> v) {
  if (v.empty()) throw std::invalid_argument("median of no timings (repetitions must be >= 1)");
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

struct Timing {
  double median = 0, low = 0, high = 0;  // seconds
};

// `run` timed `repetitions` times after one warm-up.
template <typename F>
Timing timed(int repetitions, F&& run) {
  std::vector<double> times;
  for (int rep = -1; rep < repetitions; ++rep) {
    const double start = now();
    run();
    if (rep >= 0) times.push_back(now() - start);
  }
  return {median(times), *std::min_element(times.begin(), times.end()),
          *std::max_element(times.begin(), times.end())};
}

// The practical peak of these cores in this run: a square dense double GEMM n³ through Eigen (all its threads),
// the median of `repetitions` after one warm-up, in GFLOP/s.
inline double square_gemm_gflops(int n = 2048, int repetitions = 3) {
  SeededUniform rng(3);
  const Matrix<double> a = rng.matrix<double>(n, n, 1.0), b = rng.matrix<double>(n, n, 1.0);
  Matrix<double> c(n, n);
  return 2.0 * n * n * n / timed(repetitions, [&] { c.noalias() = a * b; }).median / 1e9;
}

}  // namespace moe::cli
