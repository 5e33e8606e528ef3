// What the conformance cases share: the predictable element values, the comparison that counts #wrong, and the
// four groups of cases (collectives, sub-communicators, point to point, errors).
#pragma once

#include "distributed/tests/conformance.hpp"

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace moe::conformance {

// Element i of the block rank `src` sends to rank `dst`: distinct for src, dst < 16 and i < 2^15, and exact in
// every element type (below 2^24, so sums over up to 8 ranks stay exact in float).
template <CommElement T>
T value(int src, int dst, std::int64_t i) {
  return T(1 + src + 16 * dst + 256 * i);
}

// What receive buffers hold before a call: elements a call must not write keep it.
template <CommElement T>
constexpr T sentinel = T(-7);

// n elements of `fill`: spares the cases the casts from signed counts.
template <typename T>
std::vector<T> filled(std::int64_t n, T fill = T(0)) {
  return std::vector<T>(static_cast<std::size_t>(n), fill);
}

template <CommElement T>
std::string type_name() {
  return std::string(element_type_name(element_type_of<T>()));
}

template <CommElement T>
Tally compare(std::span<const T> got, std::span<const T> want) {
  Tally t{std::int64_t(want.size()), 0};
  if (got.size() != want.size()) return Tally{t.checked, t.checked};
  for (std::size_t i = 0; i < want.size(); ++i) t.wrong += got[i] != want[i] ? 1 : 0;
  return t;
}

template <CommElement T>
Tally compare(const std::vector<T>& got, const std::vector<T>& want) {
  return compare<T>(std::span<const T>(got), std::span<const T>(want));
}

inline std::vector<std::int64_t> prefix_sum(const std::vector<std::int64_t>& counts) {
  std::vector<std::int64_t> displs(counts.size());
  for (std::size_t j = 1; j < counts.size(); ++j) displs[j] = displs[j - 1] + counts[j - 1];
  return displs;
}

void add_collective_cases(std::vector<Case>& cases, int size);
void add_group_cases(std::vector<Case>& cases, int size);
void add_point_to_point_cases(std::vector<Case>& cases, int size);
void add_error_cases(std::vector<Case>& cases, int size);
void add_row_exchange_cases(std::vector<Case>& cases, int size);

}  // namespace moe::conformance
