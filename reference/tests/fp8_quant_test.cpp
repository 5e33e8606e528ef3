// FP8 fake quantisation of expert inputs (reference/fp8_quant.hpp), element values worked out by hand: e4m3 has
// 3 mantissa bits, so in [2^e, 2^(e+1)) its step is 2^(e−3), below 2^−6 it is 2^−9, and ties go to the even step.
#include "reference/fp8_quant.hpp"

#include <gtest/gtest.h>

#include <cmath>

namespace moe {
namespace {

TEST(Fp8Quant, EachTileHasItsOwnScale) {
  Matrix<double> x = Matrix<double>::Zero(1, 200);  // tiles [0, 128) and [128, 200)
  // Tile 1: amax 448, scale exactly 1, so x' = e4m3(x).
  x(0, 0) = 448;
  x(0, 1) = 1.0625;  // the tie between 1 and 1.125: to 1
  x(0, 2) = -0.3;    // step 2^−5 in [0.25, 0.5): 9.6 steps → 10 → −0.3125
  x(0, 3) = 0.001;   // subnormal step 2^−9: 0.512 steps → 1 → 2^−9
  // Tile 2: amax 0.875, scale 0.875/448 = 2^−9 exactly, so x' = e4m3(512·x)/512.
  x(0, 128) = 0.875;
  x(0, 129) = 0.001;  // 512·0.001 = 0.512, step 2^−4 in [0.5, 1): 8.19 steps → 8 → 0.5/512
  x(0, 130) = 0.2;    // 102.4, step 8: 12.8 → 13 → 104/512
  const Matrix<double> q = fp8_fake_quant_rows(x);
  EXPECT_EQ(q(0, 0), 448.0);
  EXPECT_EQ(q(0, 1), 1.0);
  EXPECT_EQ(q(0, 2), -0.3125);
  EXPECT_EQ(q(0, 3), std::ldexp(1, -9));
  EXPECT_EQ(q(0, 128), 0.875);
  EXPECT_EQ(q(0, 129), 0.5 / 512);  // with one scale for the whole row (1) it would be 2^−9: per-tile matters
  EXPECT_EQ(q(0, 130), 104.0 / 512);
  EXPECT_EQ(q(0, 4), 0.0);
}

TEST(Fp8Quant, AScaleThatIsNotAPowerOfTwoAndTheAmaxFloor) {
  Matrix<double> x = Matrix<double>::Zero(2, 8);
  x(0, 0) = 3;  // scale 3/448: 1 → 149.33…, step 16 in [128, 256): 9.33 → 9 → 144, times the scale
  x(0, 1) = 1;
  x(1, 0) = 1e-6;  // amax floored at 1e-4: 1e-6 · 448/1e-4 = 4.48, step 0.5: 8.96 → 9 → 4.5, times 1e-4/448
  const Matrix<double> q = fp8_fake_quant_rows(x);
  EXPECT_EQ(q(0, 0), 448.0 * (3.0 / 448.0));
  EXPECT_EQ(q(0, 1), 144.0 * (3.0 / 448.0));
  EXPECT_EQ(q(1, 0), 4.5 * (1e-4 / 448.0));
  EXPECT_EQ(q(1, 1), 0.0);
}

}  // namespace
}  // namespace moe
