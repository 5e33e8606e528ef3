#include "reference/fp4_to_fp8.hpp"

#include <cmath>

namespace moe {
namespace {

// The nonzero e2m1 codes' values (positive half; the sign does not change exactness).
std::vector<double> e2m1_magnitudes() {
  std::vector<double> v;
  for (int c = 1; c < 8; ++c) v.push_back(decode(Minifloat::e2m1, std::uint8_t(c)));
  return v;
}

}  // namespace

bool is_e4m3(double x) { return std::isfinite(x) && round_to(Minifloat::e4m3, x) == x; }

std::vector<OffsetCensus> mxfp4_offset_census(int lo, int hi) {
  std::vector<OffsetCensus> out;
  for (int d = lo; d <= hi; ++d) {
    OffsetCensus c{d, 0};
    for (int code = 0; code < code_count(Minifloat::e2m1); ++code)
      c.exact_codes += is_e4m3(std::ldexp(decode(Minifloat::e2m1, std::uint8_t(code)), d));
    out.push_back(c);
  }
  return out;
}

int mxfp4_largest_lossless_spread() {
  const std::vector<double> magnitudes = e2m1_magnitudes();
  int largest = -1;
  for (int spread = 0; spread <= 40; ++spread) {
    // Sub-blocks at exponents 0 … spread (every one between them too); some j must serve them all.
    bool some_j = false;
    for (int j = -60; j <= 60 && !some_j; ++j) {
      bool all = true;
      for (int k = 0; k <= spread && all; ++k)
        for (double v : magnitudes) all = all && is_e4m3(std::ldexp(v, k - j));
      some_j = all;
    }
    if (some_j) largest = spread;
  }
  return largest;
}

PairCount nvfp4_exact_pairs() {
  PairCount count;
  for (double v : e2m1_magnitudes())
    for (int s = 1; s < code_count(Minifloat::e4m3) / 2; ++s) {
      const double scale = decode(Minifloat::e4m3, std::uint8_t(s));
      if (!std::isfinite(scale)) continue;
      ++count.total;
      bool exact = false;
      for (int j = -40; j <= 40 && !exact; ++j) exact = is_e4m3(std::ldexp(v * scale, -j));
      count.exact += exact;
    }
  return count;
}

PairCount mxfp4_exact_pairs_under_amax_scale() {
  // In exact arithmetic: S = 6 · 2^k / 448 = 2^k · 3/224, so an element v · 2^(k + d) is exact iff
  // q = v · 2^d · 224/3 is an e4m3 value. 2v is an integer; q is dyadic only when 3 divides 2v · 224.
  PairCount count;
  for (double v : e2m1_magnitudes())
    for (int d = -14; d <= 0; ++d) {
      ++count.total;
      const long long numerator = std::llround(2 * v) * 224;
      if (numerator % 3 == 0) count.exact += is_e4m3(std::ldexp(double(numerator / 3), d - 1));
    }
  return count;
}

}  // namespace moe
