// What the two .npy harnesses check of an array a reader accepted.
#pragma once

#include "formats/npy.hpp"

#include <cstddef>
#include <cstring>
#include <vector>

namespace moe::fuzz {

// The number of values in the vector of the array's dtype (the others must be empty).
inline std::size_t value_count(const formats::NpyArray& a) {
  using formats::NpyDtype;
  switch (a.dtype) {
    case NpyDtype::f8:
    case NpyDtype::f4: return a.integers.empty() && a.booleans.empty() ? a.reals.size() : std::size_t(-1);
    case NpyDtype::i8:
    case NpyDtype::i4:
    case NpyDtype::u2: return a.reals.empty() && a.booleans.empty() ? a.integers.size() : std::size_t(-1);
    case NpyDtype::b1: return a.reals.empty() && a.integers.empty() ? a.booleans.size() : std::size_t(-1);
  }
  return std::size_t(-1);
}

// The shape says as many values as there are.
inline bool consistent(const formats::NpyArray& a) {
  return a.size() >= 0 && value_count(a) == static_cast<std::size_t>(a.size());
}

template <typename V>
bool same_bytes(const std::vector<V>& x, const std::vector<V>& y) {
  return x.size() == y.size() && (x.empty() || std::memcmp(x.data(), y.data(), x.size() * sizeof(V)) == 0);
}

// Same dtype, shape and value bytes (bytes, not ==: NaN payloads and -0.0 must survive a round trip too).
inline bool same_array(const formats::NpyArray& a, const formats::NpyArray& b) {
  return a.dtype == b.dtype && a.shape == b.shape && same_bytes(a.reals, b.reals) &&
         same_bytes(a.integers, b.integers) && same_bytes(a.booleans, b.booleans);
}

}  // namespace moe::fuzz
