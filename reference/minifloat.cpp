#include "reference/minifloat.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace moe {
namespace {

struct Layout {
  int exponent_bits, mantissa_bits, bias;
  double largest;  // the largest finite value
};

Layout layout_of(Minifloat f) {
  switch (f) {
    case Minifloat::e4m3: return {4, 3, 7, 448.0};
    case Minifloat::e5m2: return {5, 2, 15, 57344.0};
    case Minifloat::e2m1: return {2, 1, 1, 6.0};
  }
  throw std::logic_error("unknown minifloat format");
}

int sign_bit(const Layout& l) { return 1 << (l.exponent_bits + l.mantissa_bits); }

}  // namespace

std::string_view to_string(Minifloat f) {
  switch (f) {
    case Minifloat::e4m3: return "e4m3";
    case Minifloat::e5m2: return "e5m2";
    case Minifloat::e2m1: return "e2m1";
  }
  return "?";
}

int code_count(Minifloat f) { return 2 * sign_bit(layout_of(f)); }

double largest_finite(Minifloat f) { return layout_of(f).largest; }

double decode(Minifloat f, std::uint8_t code) {
  const Layout l = layout_of(f);
  if (code >= code_count(f))
    throw std::invalid_argument("decode: code " + std::to_string(code) + " is not a " + std::string(to_string(f)) +
                                " code (0 … " + std::to_string(code_count(f) - 1) + ")");
  const double sign = (code & sign_bit(l)) ? -1.0 : 1.0;
  const int field = (code >> l.mantissa_bits) & ((1 << l.exponent_bits) - 1);
  const int mantissa = code & ((1 << l.mantissa_bits) - 1);
  const int top = (1 << l.exponent_bits) - 1;
  if (field == top && f == Minifloat::e4m3 && mantissa == (1 << l.mantissa_bits) - 1)
    return std::numeric_limits<double>::quiet_NaN();
  if (field == top && f == Minifloat::e5m2)
    return mantissa == 0 ? sign * std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  if (field == 0) return sign * std::ldexp(mantissa, 1 - l.bias - l.mantissa_bits);  // 0.m · 2^(1 − bias)
  return sign * std::ldexp((1 << l.mantissa_bits) + mantissa, field - l.bias - l.mantissa_bits);
}

std::uint8_t encode(Minifloat f, double x) {
  const Layout l = layout_of(f);
  const int sign = std::signbit(x) ? sign_bit(l) : 0;
  if (std::isnan(x)) {
    if (f == Minifloat::e2m1) throw std::invalid_argument("encode: e2m1 has no NaN");
    // e4m3: S.1111.111; e5m2: S.11111.10 (a quiet NaN).
    return static_cast<std::uint8_t>(sign | (f == Minifloat::e4m3 ? 0x7F : 0x7E));
  }
  double a = std::fabs(x);
  const int min_exponent = 1 - l.bias;  // of the smallest normal; the subnormals share its quantum
  if (a != 0 && std::isfinite(a)) {
    int e = 0;
    std::frexp(a, &e);  // a = m · 2^e, m in [0.5, 1): the leading bit is 2^(e − 1)
    const int quantum = std::max(e - 1, min_exponent) - l.mantissa_bits;
    a = std::ldexp(std::nearbyint(std::ldexp(a, -quantum)), quantum);  // exact: ties go to the even multiple
  }
  if (!(a <= l.largest)) a = l.largest;  // finite overflow and ±inf saturate
  if (a == 0) return static_cast<std::uint8_t>(sign);
  int e = 0;
  std::frexp(a, &e);
  int field = e - 1 + l.bias;
  int mantissa = 0;
  if (field <= 0) {  // subnormal: 0.m · 2^(1 − bias)
    field = 0;
    mantissa = static_cast<int>(std::ldexp(a, l.mantissa_bits - min_exponent));
  } else {
    mantissa = static_cast<int>(std::ldexp(a, l.mantissa_bits - (e - 1))) - (1 << l.mantissa_bits);
  }
  return static_cast<std::uint8_t>(sign | (field << l.mantissa_bits) | mantissa);
}

double round_to(Minifloat f, double x) { return decode(f, encode(f, x)); }

std::uint8_t e8m0_of_exponent(int e) { return static_cast<std::uint8_t>(std::clamp(e, -127, 127) + 127); }

double decode_e8m0(std::uint8_t code) {
  return code == 0xFF ? std::numeric_limits<double>::quiet_NaN() : std::ldexp(1.0, int(code) - 127);
}

}  // namespace moe
