#include "reference/bf16.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace moe {

double round_bf16_by_quantum(double x) {
  if (!std::isfinite(x) || x == 0) return x;  // NaN, ±inf and ±0 are bf16 values already
  // |x| = m·2^e with m in [0.5, 1): 8 significant bits put the quantum at 2^(e − 8). Below 2^−126 (bf16's smallest
  // normal) the quantum stays at the subnormals' 2^−133.
  int e = 0;
  (void)std::frexp(x, &e);
  const double quantum = std::ldexp(1.0, std::max(e, -125) - 8);
  // x / quantum is exact (a power of two); nearbyint rounds it to the nearest integer, ties to even.
  const double r = std::nearbyint(x / quantum) * quantum;
  const double largest = std::ldexp(255.0, 120);  // 1.1111111₂ · 2^127
  return std::fabs(r) > largest ? std::copysign(std::numeric_limits<double>::infinity(), x) : r;
}

double round_bf16(double x) {
  // Where x is in bf16's normal range (2^−126 ≤ |x| < 2^128) the quantum is bit 45 of the double (the 7th of its 52
  // mantissa bits from the top), so rounding is integer arithmetic on the bits: add just under half a quantum, plus
  // the lowest kept bit (ties to even), and clear the 45 bits below. A carry out of the mantissa moves to the next
  // binade, as rounding up does; past 1.1111111₂·2^127 that is 2^128, outside bf16: inf. Elsewhere (zeros,
  // subnormals, inf, NaN, the huge) the quantum formula. tests/bf16_test.cpp checks that both agree.
  constexpr int kDropped = 52 - 7;
  constexpr std::uint64_t kMinExponent = 1023 - 126, kMaxExponent = 1023 + 127;
  const auto bits = std::bit_cast<std::uint64_t>(x);
  const std::uint64_t exponent = (bits >> 52) & 0x7ff;
  if (exponent < kMinExponent || exponent > kMaxExponent) return round_bf16_by_quantum(x);
  const std::uint64_t lowest_kept = (bits >> kDropped) & 1;
  const std::uint64_t rounded = (bits + ((std::uint64_t{1} << (kDropped - 1)) - 1) + lowest_kept) &
                                ~((std::uint64_t{1} << kDropped) - 1);
  if (((rounded >> 52) & 0x7ff) > kMaxExponent) return std::copysign(std::numeric_limits<double>::infinity(), x);
  return std::bit_cast<double>(rounded);
}

}  // namespace moe
