#include "reference/bf16.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace moe {

double round_bf16(double x) {
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

}  // namespace moe
