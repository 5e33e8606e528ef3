// The minifloat formats (reference/minifloat.hpp) against tables written out by hand from the format
// definitions, and against ml_dtypes on ~3000 probing inputs (tests/data/minifloat_ml_dtypes.txt).
#include "reference/minifloat.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

namespace moe {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Every e2m1 code: sign | 2 exponent bits (bias 1) | 1 mantissa bit; field 0 is 0.m.
TEST(Minifloat, EveryE2m1CodeByHand) {
  const std::vector<double> positive{0, 0.5, 1, 1.5, 2, 3, 4, 6};
  for (int c = 0; c < 8; ++c) {
    EXPECT_EQ(decode(Minifloat::e2m1, std::uint8_t(c)), positive[std::size_t(c)]) << c;
    EXPECT_EQ(decode(Minifloat::e2m1, std::uint8_t(c + 8)), -positive[std::size_t(c)]) << c + 8;
  }
  EXPECT_TRUE(std::signbit(decode(Minifloat::e2m1, 0x8)));
  EXPECT_THROW(decode(Minifloat::e2m1, 16), std::invalid_argument);
}

TEST(Minifloat, E4m3AndE5m2AnchorsByHand) {
  const auto e4m3 = [](int c) { return decode(Minifloat::e4m3, std::uint8_t(c)); };
  EXPECT_EQ(e4m3(0x01), std::ldexp(1, -9));      // smallest subnormal: 0.001 · 2^−6
  EXPECT_EQ(e4m3(0x07), 7 * std::ldexp(1, -9));  // largest subnormal
  EXPECT_EQ(e4m3(0x08), std::ldexp(1, -6));      // smallest normal
  EXPECT_EQ(e4m3(0x38), 1.0);                    // field 7 = bias
  EXPECT_EQ(e4m3(0x39), 1.125);
  EXPECT_EQ(e4m3(0x78), 256.0);
  EXPECT_EQ(e4m3(0x7E), 448.0);  // 1.110 · 2^8, the largest
  EXPECT_TRUE(std::isnan(e4m3(0x7F)) && std::isnan(e4m3(0xFF)));
  EXPECT_EQ(e4m3(0xFE), -448.0);
  const auto e5m2 = [](int c) { return decode(Minifloat::e5m2, std::uint8_t(c)); };
  EXPECT_EQ(e5m2(0x01), std::ldexp(1, -16));
  EXPECT_EQ(e5m2(0x04), std::ldexp(1, -14));
  EXPECT_EQ(e5m2(0x3C), 1.0);
  EXPECT_EQ(e5m2(0x7B), 57344.0);  // 1.11 · 2^15
  EXPECT_EQ(e5m2(0x7C), kInf);
  EXPECT_EQ(e5m2(0xFC), -kInf);
  for (int c : {0x7D, 0x7E, 0x7F, 0xFD}) EXPECT_TRUE(std::isnan(e5m2(c))) << c;
}

// Ties go to the even code (mantissa bit 0), also from a double beyond float32's precision; overflow saturates.
TEST(Minifloat, RoundsToNearestEvenAndSaturatesByHand) {
  const auto e4m3 = [](double x) { return int(encode(Minifloat::e4m3, x)); };
  EXPECT_EQ(e4m3(1.0625), 0x38);                      // between 1 and 1.125: to 1.000
  EXPECT_EQ(e4m3(1.1875), 0x3A);                      // between 1.125 and 1.25: to 1.010
  EXPECT_EQ(e4m3(1.0625 + std::ldexp(1, -40)), 0x39);  // just above the tie (float32 would round it onto it)
  EXPECT_EQ(e4m3(std::ldexp(1, -10)), 0x00);           // half the smallest subnormal: to 0
  EXPECT_EQ(e4m3(3 * std::ldexp(1, -10)), 0x02);       // between 1 and 2 subnormal quanta: to 2
  EXPECT_EQ(e4m3(460.0), 0x7E);
  EXPECT_EQ(e4m3(470.0), 0x7E);  // would round to 480, which does not exist: saturated
  EXPECT_EQ(e4m3(1e9), 0x7E);
  EXPECT_EQ(e4m3(kInf), 0x7E);
  EXPECT_EQ(e4m3(-kInf), 0xFE);
  EXPECT_EQ(e4m3(kNaN), 0x7F);
  EXPECT_EQ(e4m3(-0.0), 0x80);
  EXPECT_EQ(int(encode(Minifloat::e5m2, 61440.0)), 0x7B);  // the tie between 57344 and 65536: saturated
  EXPECT_EQ(int(encode(Minifloat::e5m2, kInf)), 0x7B);
  EXPECT_EQ(int(encode(Minifloat::e5m2, kNaN)), 0x7E);
  const auto e2m1 = [](double x) { return decode(Minifloat::e2m1, encode(Minifloat::e2m1, x)); };
  EXPECT_EQ(e2m1(0.25), 0.0);
  EXPECT_EQ(e2m1(0.75), 1.0);
  EXPECT_EQ(e2m1(1.25), 1.0);
  EXPECT_EQ(e2m1(1.75), 2.0);
  EXPECT_EQ(e2m1(2.5), 2.0);
  EXPECT_EQ(e2m1(5.0), 4.0);
  EXPECT_EQ(e2m1(-5.5), -6.0);
  EXPECT_EQ(e2m1(7.0), 6.0);
  EXPECT_EQ(e2m1(kInf), 6.0);
  EXPECT_THROW(encode(Minifloat::e2m1, kNaN), std::invalid_argument);
}

TEST(Minifloat, EveryFiniteCodeRoundTripsAndTheValuesIncrease) {
  for (Minifloat f : {Minifloat::e4m3, Minifloat::e5m2, Minifloat::e2m1}) {
    double previous = -1;
    int finite = 0;
    for (int c = 0; c < code_count(f) / 2; ++c) {  // the positive half, in code order
      const double v = decode(f, std::uint8_t(c));
      if (!std::isfinite(v)) continue;
      ++finite;
      EXPECT_GT(v, previous) << to_string(f) << " code " << c;
      previous = v;
      EXPECT_EQ(int(encode(f, v)), c) << to_string(f);
      EXPECT_EQ(int(encode(f, -v)), c + code_count(f) / 2) << to_string(f);
    }
    EXPECT_EQ(previous, largest_finite(f)) << to_string(f);
    EXPECT_EQ(finite, f == Minifloat::e4m3 ? 127 : f == Minifloat::e5m2 ? 124 : 8) << to_string(f);
  }
}

TEST(Minifloat, E8m0ScaleByHand) {
  EXPECT_EQ(e8m0_of_exponent(0), 127);
  EXPECT_EQ(decode_e8m0(127), 1.0);
  EXPECT_EQ(decode_e8m0(e8m0_of_exponent(-3)), 0.125);
  EXPECT_EQ(e8m0_of_exponent(-200), 0);  // clamped to 2^−127
  EXPECT_EQ(decode_e8m0(0), std::ldexp(1, -127));
  EXPECT_EQ(e8m0_of_exponent(300), 254);
  EXPECT_EQ(decode_e8m0(254), std::ldexp(1, 127));
  EXPECT_TRUE(std::isnan(decode_e8m0(0xFF)));
}

TEST(Minifloat, AgreesWithMlDtypesOnEveryProbe) {
  std::ifstream file(std::string(REFERENCE_TEST_DATA) + "/minifloat_ml_dtypes.txt");
  ASSERT_TRUE(file) << "missing tests/data/minifloat_ml_dtypes.txt";
  std::string line;
  int compared = 0;
  while (std::getline(file, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string name, input, code;
    fields >> name >> input >> code;
    const Minifloat f = name == "e4m3" ? Minifloat::e4m3 : name == "e5m2" ? Minifloat::e5m2 : Minifloat::e2m1;
    const double x = std::strtod(input.c_str(), nullptr);
    EXPECT_EQ(int(encode(f, x)), std::stoi(code, nullptr, 16)) << line;
    ++compared;
  }
  EXPECT_GT(compared, 3000);
}

}  // namespace
}  // namespace moe
