// Timing helpers shared by the benchmarks of `moe-oracle bench`: a monotonic clock in seconds and the median.
#pragma once

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

}  // namespace moe::cli
