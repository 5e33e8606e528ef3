// Shared by the CUDA tests: the skip rule, the tolerance of each dtype and comparison helpers.
//
// Tolerances are the device-kernel rows of reference/tolerance.hpp (|got − ref| <= atol + rtol·|ref|), against a
// CPU result computed in the same type for double and float and in double on bf16-rounded inputs for bf16. Kernels that promise the CPU's exact result (permute, unpermute, scatter-add, chunk sort) are checked for
// equality instead.
#pragma once

#include "cuda/bfloat16.hpp"
#include "cuda/device_buffer.hpp"
#include "cuda/device_probe.hpp"
#include "reference/tolerance.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#define MOE_REQUIRE_GPU()                                                          \
  do {                                                                             \
    if (::moe::cuda::visible_device_count() == 0) GTEST_SKIP() << "skipped: no GPU"; \
  } while (0)

namespace moe::cuda::testing {

// The device-kernel row of reference/tolerance.hpp for the type under test.
template <typename T>
Tolerance tolerance() {
  if constexpr (std::is_same_v<T, double>) return moe::tolerance(Compared::device_kernel, Precision::float64);
  else if constexpr (std::is_same_v<T, float>) return moe::tolerance(Compared::device_kernel, Precision::float32);
  else return moe::tolerance(Compared::device_kernel, Precision::bfloat16);
}

template <typename T>
double as_double(T v) {
  if constexpr (std::is_same_v<T, bf16>) return double(to_float(v));
  else return double(v);
}

template <typename T>
T from_double(double v) {
  if constexpr (std::is_same_v<T, bf16>) return to_bf16(float(v));
  else return T(v);
}

// Expects every element within tolerance; reports the count and the first few misses.
template <typename G, typename R>
void expect_close(const std::vector<G>& got, const std::vector<R>& ref, Tolerance tol, const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  int misses = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = as_double(got[i]), r = as_double(ref[i]);
    if (tol.admits(g, r)) continue;
    if (++misses <= 5) ADD_FAILURE() << what << "[" << i << "]: got " << g << ", expected " << r;
  }
  EXPECT_EQ(misses, 0) << what << ": " << misses << " of " << got.size() << " elements outside tolerance";
}

// Dyadic values k/8 with |k| <= 8: products and short sums are exact in every type, so ties stay ties.
inline std::vector<double> dyadic(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> k(-8, 8);
  std::vector<double> v(n);
  for (auto& x : v) x = k(gen) / 8.0;
  return v;
}

inline std::vector<double> uniform(std::size_t n, unsigned seed, double scale = 1.0) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> u(-scale, scale);
  std::vector<double> v(n);
  for (auto& x : v) x = u(gen);
  return v;
}

template <typename T>
std::vector<T> cast(const std::vector<double>& v) {
  std::vector<T> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = from_double<T>(v[i]);
  return out;
}

// v rounded through T and back (bf16 test inputs for a double CPU reference).
template <typename T>
std::vector<double> rounded(const std::vector<double>& v) {
  std::vector<double> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = as_double(from_double<T>(v[i]));
  return out;
}

template <typename T>
DeviceBuffer<T> upload(const std::vector<T>& v) {
  return DeviceBuffer<T>::from_host(v);
}

}  // namespace moe::cuda::testing
