// bf16 on the host: the storage type of bf16 device data in the host API, bit-compatible with __nv_bfloat16
// (1 sign, 8 exponent, 7 mantissa bits: the top half of an IEEE float). Conversions round to nearest even, as
// __float2bfloat16 does, so host-rounded test inputs equal what a device conversion would produce.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace moe::cuda {

struct bf16 {
  std::uint16_t bits = 0;
};
static_assert(sizeof(bf16) == 2);

inline bf16 to_bf16(float f) {
  std::uint32_t u = 0;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0) return bf16{std::uint16_t((u >> 16) | 0x40u)};
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return bf16{std::uint16_t(u >> 16)};
}

inline float to_float(bf16 b) {
  const std::uint32_t u = std::uint32_t(b.bits) << 16;
  float f = 0;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Whether every one of n floats is a bf16 value (to bf16 and back gives it again; never for NaN): then a copy into
// bf16 is exact.
inline bool holds_bf16_values(const float* data, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const float v = data[i];
    if (!(to_float(to_bf16(v)) == v)) return false;
  }
  return true;
}

}  // namespace moe::cuda
