// Properties of the parallel system's FP8 cast (distributed/kernels/fp8_rows.hpp) against the oracle's
// (reference/fp8_quant.hpp, reference/minifloat.hpp): two implementations, one written from the format's rules by
// bit arithmetic, the other by exact rounding in double.
//
// The model rows the default set dispatches are narrower than one 1×128 tile and never reach e4m3's saturation (a
// tile's scale maps its amax to 448 exactly), so these draw what the training step does not: rows of up to three
// tiles whose tiles differ in magnitude by up to 2^±40, and single values anywhere in double's range.
#include <rapidcheck.h>

#include <cmath>
#include <limits>
#include <sstream>

#include "distributed/kernels/fp8_rows.hpp"
#include "proptests/property.hpp"
#include "reference/fp8_quant.hpp"
#include "reference/minifloat.hpp"

namespace moe::proptest {
namespace {

std::string exact(double v) {
  std::ostringstream s;
  s.precision(17);
  s << v;
  return s.str();
}

// A value with a uniformly drawn binary exponent in [lo, hi] and a random 20-bit mantissa and sign.
rc::Gen<double> scaled_values(int lo, int hi) {
  return rc::gen::map(
      rc::gen::tuple(rc::gen::inRange(lo, hi + 1), rc::gen::inRange(0, 1 << 20), rc::gen::arbitrary<bool>()),
      [](const std::tuple<int, int, bool>& t) {
        const double v = std::ldexp(1.0 + std::get<1>(t) / double(1 << 20), std::get<0>(t));
        return std::get<2>(t) ? -v : v;
      });
}

template <typename T>
void require_rows_match() {
  const int rows = *rc::gen::inRange(1, 4);
  const int cols = *rc::gen::inRange(1, 3 * 128 + 1);
  RC_TAG(cols > 128 ? "several tiles" : "one tile");
  Matrix<T> x(rows, cols);
  for (int r = 0; r < rows; ++r)
    for (int begin = 0; begin < cols; begin += 128) {
      const int shift = *rc::gen::inRange(-40, 41);  // each tile its own magnitude
      for (int j = begin; j < std::min(begin + 128, cols); ++j)
        x(r, j) = static_cast<T>(std::ldexp(*scaled_values(-12, 0), shift));
    }
  const Matrix<T> want = fp8_fake_quant_rows(x);
  const Matrix<T> got = kernels::fp8_dequantise_rows(kernels::fp8_quantise_rows(x));
  for (Eigen::Index i = 0; i < x.size(); ++i)
    if (got.data()[i] != want.data()[i])
      RC_FAIL("FP8 cast of a [" + std::to_string(rows) + ", " + std::to_string(cols) + "] block: element " +
              std::to_string(i) + " is " + exact(double(got.data()[i])) + ", the oracle's " +
              exact(double(want.data()[i])));
}

}  // namespace

MOE_PROPERTY(Fp8, RowCastMatchesTheOracleInDouble, 200, ()) { require_rows_match<double>(); }

MOE_PROPERTY(Fp8, RowCastMatchesTheOracleInFloat, 200, ()) { require_rows_match<float>(); }

// Every kind of double: normals, subnormals and beyond 448 (up to 2^20), halfway points between codes, ±0, ±inf.
MOE_PROPERTY(Fp8, E4m3EncodeMatchesTheReference, 300, ()) {
  const double inf = std::numeric_limits<double>::infinity();
  const double v = *rc::gen::oneOf(scaled_values(-12, 20), rc::gen::element(0.0, -0.0, inf, -inf, 464.0, -464.0),
                                   rc::gen::map(rc::gen::inRange(0, 255), [](int code) {
                                     // halfway between a code and the next one up
                                     const double a = decode(Minifloat::e4m3, static_cast<std::uint8_t>(code));
                                     const double b = decode(Minifloat::e4m3, static_cast<std::uint8_t>(code + 1));
                                     return std::isfinite(a) && std::isfinite(b) ? (a + b) / 2 : a;
                                   }));
  RC_TAG(std::fabs(v) > 448 ? "beyond 448" : std::fabs(v) < std::ldexp(1.0, -6) ? "subnormal" : "normal");
  const std::uint8_t want = encode(Minifloat::e4m3, v), got = kernels::e4m3_encode(v);
  if (got != want)
    RC_FAIL("e4m3 of " + exact(v) + ": code " + std::to_string(got) + ", the reference's " + std::to_string(want));
  if (std::isfinite(decode(Minifloat::e4m3, want)))
    RC_ASSERT(kernels::e4m3_decode(got) == decode(Minifloat::e4m3, want));
}

}  // namespace moe::proptest
