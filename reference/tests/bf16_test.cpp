// bf16 rounding (reference/bf16.hpp) against values worked out from the format by hand, and against torch's
// float32 → bfloat16 conversion on ~3000 probes (tests/data/bf16_torch.txt: random bit patterns, every kind of
// tie, subnormals, the overflow boundary).
#include "reference/bf16.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <string>

namespace moe {
namespace {

double two(int e) { return std::ldexp(1.0, e); }

TEST(Bf16, RoundsToNearestEvenByHand) {
  EXPECT_EQ(round_bf16(1.0), 1.0);
  EXPECT_EQ(round_bf16(1 + two(-7)), 1 + two(-7));              // one ulp above 1 is a bf16
  EXPECT_EQ(round_bf16(1 + two(-8)), 1.0);                      // the tie between 1 and 1 + 2^−7: even (1)
  EXPECT_EQ(round_bf16(1 + 3 * two(-8)), 1 + two(-6));          // the tie between odd and even: up to even
  EXPECT_EQ(round_bf16(1 + two(-8) + two(-40)), 1 + two(-7));   // just above the tie: up, as the nearest is
  EXPECT_EQ(round_bf16(-(1 + two(-8) + two(-40))), -(1 + two(-7)));
  EXPECT_EQ(round_bf16(3.14159), 3.140625);                     // 11.001001 0000111…₂ → 11.001001₂
}

TEST(Bf16, SubnormalsZeroesAndOverflow) {
  EXPECT_EQ(round_bf16(two(-133)), two(-133));       // the smallest subnormal
  EXPECT_EQ(round_bf16(two(-134)), 0.0);             // half of it: the tie goes to even, 0
  EXPECT_EQ(round_bf16(1.5 * two(-134)), two(-133));
  EXPECT_EQ(round_bf16(two(-126) - two(-134)), two(-126));  // the largest subnormal's tie rounds up to the smallest normal
  EXPECT_TRUE(std::signbit(round_bf16(-0.0)));
  EXPECT_TRUE(std::signbit(round_bf16(-two(-140))));
  const double largest = 255 * two(120);
  EXPECT_EQ(round_bf16(largest), largest);
  EXPECT_EQ(round_bf16(largest + two(119) - two(80)), largest);  // below the tie
  EXPECT_TRUE(std::isinf(round_bf16(largest + two(119))));      // the tie: the even neighbour is 2^128, inf
  EXPECT_EQ(round_bf16(-1e300), -std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(round_bf16(std::numeric_limits<double>::quiet_NaN())));
}

TEST(Bf16, AgreesWithTorchOnEveryProbe) {
  std::ifstream file(std::string(REFERENCE_TEST_DATA) + "/bf16_torch.txt");
  ASSERT_TRUE(file) << "missing tests/data/bf16_torch.txt";
  std::string line;
  int probes = 0;
  while (std::getline(file, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream in(line);
    std::uint32_t input = 0, expected = 0;
    in >> std::hex >> input >> expected;
    float x = 0;
    std::memcpy(&x, &input, sizeof x);
    const float r = round_bf16(x);
    std::uint32_t bits = 0;
    std::memcpy(&bits, &r, sizeof bits);
    EXPECT_EQ(bits & 0xffffu, 0u) << line;
    EXPECT_EQ(bits >> 16, expected) << line;
    ++probes;
  }
  EXPECT_GT(probes, 3000);
}

// round_bf16 works on the bits in bf16's normal range; round_bf16_by_quantum is the definition. Random bit patterns
// over every exponent, and the values a rounding gets wrong first: the ties, one double either side of them, and the
// binade edges (the smallest normal, the carry into the next binade, the overflow to inf).
TEST(Bf16, BitRoundingIsTheQuantumFormulaOnEveryKindOfDouble) {
  std::mt19937_64 rng(7);
  auto same = [](double x) {
    const double want = round_bf16_by_quantum(x), got = round_bf16(x);
    return std::memcmp(&want, &got, sizeof want) == 0 || (std::isnan(want) && std::isnan(got));
  };
  int checked = 0, wrong = 0;
  auto probe = [&](double x) {
    ++checked;
    if (!same(x) && ++wrong <= 5) ADD_FAILURE() << "x = " << std::hexfloat << x << ": " << round_bf16(x) << " vs "
                                                << round_bf16_by_quantum(x);
  };
  for (int i = 0; i < 200000; ++i) {
    const std::uint64_t bits = rng();
    double x = 0;
    std::memcpy(&x, &bits, sizeof x);
    probe(x);
    // The same mantissa at an exponent near bf16's range, where the fast path's edges are.
    const std::uint64_t near = (bits & 0x800fffffffffffffULL) | (std::uint64_t(1023 - 140 + rng() % 280) << 52);
    std::memcpy(&x, &near, sizeof x);
    probe(x);
  }
  for (int e = -140; e <= 128; ++e) {
    for (int m = 0; m < 256; ++m) {
      // In binade e (2^e ≤ x < 2^(e+1)) bf16's values are 2^(e−7) apart: m even is one of them, m odd the tie
      // halfway between two.
      const double v = (256 + m) * two(e - 8);
      for (double x : {v, std::nextafter(v, 0.0), std::nextafter(v, 1e308)}) {
        probe(x);
        probe(-x);
      }
    }
  }
  EXPECT_EQ(wrong, 0) << "of " << checked;
  EXPECT_GT(checked, 600000);
}

TEST(Bf16, StoredRoundsOnlyAtAStoragePoint) {
  Matrix<double> m(2, 2);
  m << 1 + two(-8) + two(-40), 0.1, -3.14159, 1e-40;
  EXPECT_EQ(stored(false, m), m);
  const Matrix<double> r = stored(true, m);
  for (Eigen::Index i = 0; i < m.size(); ++i) EXPECT_EQ(r.data()[i], round_bf16(m.data()[i]));
  EXPECT_EQ(r(0, 0), 1 + two(-7));
}

}  // namespace
}  // namespace moe
