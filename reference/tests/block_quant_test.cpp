// Block-scaled quantisation (reference/block_quant.hpp) on blocks whose every expected value is derived by hand in
// the comments: the scale each recipe picks, then the element rounding (to nearest, ties to even, saturating).
#include "reference/block_quant.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>

namespace moe {
namespace {

TEST(BlockQuant, Fp8WeightBlocksScaleEach128By128BlockByItsOwnAmax) {
  Matrix<double> w = Matrix<double>::Zero(130, 2);
  w(0, 0) = 896.0;    // block rows 0–127: amax 896, s = 896/448 = 2
  w(5, 1) = 3.0;      // 3/2 = 1.5, an e4m3 value: back to 3
  w(7, 0) = 1.03125;  // /2 = 1.03125·2^−1; e4m3 keeps 3 fraction bits: 1.0·2^−1, back to 1
  w(128, 0) = 1.0;    // rows 128–129: amax 1, s = 1/448: 1 → 448 → 1
  w(129, 1) = 0.3;    // 0.3·448 = 134.4 = 1.05·2^7, nearest on the 16-step grid is 128: back to 128/448
  const Matrix<double> q = fp8_fake_quant_blocks(w);
  EXPECT_EQ(q(0, 0), 896.0);
  EXPECT_EQ(q(5, 1), 3.0);
  EXPECT_EQ(q(7, 0), 1.0);
  EXPECT_EQ(q(128, 0), 1.0);
  EXPECT_DOUBLE_EQ(q(129, 1), 128.0 / 448.0);
  EXPECT_EQ(q(1, 1), 0.0);
  EXPECT_NO_THROW(fp8_fake_quant_blocks(w, Minifloat::e5m2));
  EXPECT_THROW(fp8_fake_quant_blocks(w, Minifloat::e2m1), std::invalid_argument);
}

TEST(BlockQuant, Mxfp4SharesAPowerOfTwoPer32AndSaturates) {
  Matrix<double> x = Matrix<double>::Zero(2, 40);
  // Row 0, block 0: amax 6 = 1.5·2^2, X = 2 − 2 = 0, scale 1 (e8m0 code 127). Ties go to the even code:
  // 0.25 → 0, 0.75 → 1 (between 0.5 = 0.1b and 1.0 = 1.0b), −2.5 → −2, 5 → 4.
  x(0, 0) = 6;
  x(0, 1) = 0.75;
  x(0, 2) = 0.25;
  x(0, 3) = -2.5;
  x(0, 4) = 5;
  // Row 0, block 1 (columns 32–39): amax 0.1 = 1.6·2^−4, X = −4 − 2 = −6; 0.1·2^6 = 6.4 saturates to 6: 6/64.
  x(0, 33) = 0.1;
  x(0, 34) = 0.05;  // 3.2 → 3: 3/64
  // Row 1, block 0: amax 7.9 = 1.975·2^2, X = 0; 7.9 saturates to 6 (the spec's clipping above 1.5·2^emax).
  x(1, 7) = 7.9;
  // Row 1, block 1 is all zero: X = −127 (e8m0 code 0), elements 0.
  const Mxfp4 q = mxfp4_quantise(x);
  ASSERT_EQ(q.scales.size(), 4u);
  EXPECT_EQ(q.scales[0], 127);
  EXPECT_EQ(q.scales[1], 121);
  EXPECT_EQ(q.scales[2], 127);
  EXPECT_EQ(q.scales[3], 0);
  const Matrix<double> d = mxfp4_dequantise(q);
  EXPECT_EQ(d(0, 0), 6.0);
  EXPECT_EQ(d(0, 1), 1.0);
  EXPECT_EQ(d(0, 2), 0.0);
  EXPECT_EQ(d(0, 3), -2.0);
  EXPECT_EQ(d(0, 4), 4.0);
  EXPECT_EQ(d(0, 33), 6.0 / 64);
  EXPECT_EQ(d(0, 34), 3.0 / 64);
  EXPECT_EQ(d(1, 7), 6.0);
  EXPECT_EQ(d(1, 35), 0.0);
}

TEST(BlockQuant, Nvfp4ScalesEach16ByAnE4m3OfAmaxOver6) {
  Matrix<double> x = Matrix<double>::Zero(1, 48);
  x(0, 40) = 2688;  // the tensor amax 448·6: S = 1. Its block: d = e4m3(2688/6) = 448, 2688/448 = 6.
  // Block 0: amax 12, d = e4m3(2) = 2: 12 → 6, 3 → 1.5, 1 → 0.5, 0.7 → 0.35 → 0.5 (nearer than 0): 1.0.
  x(0, 0) = 12;
  x(0, 1) = 3;
  x(0, 2) = 1;
  x(0, 3) = 0.7;
  // Block 1: amax 1.3, 1.3/6 = 0.21667 = 1.733·2^−3, e4m3 rounds to 1.75·2^−3 = 0.21875.
  // 1.3/0.21875 = 5.94 → 6: 1.3125; 0.5/0.21875 = 2.29 → 2: 0.4375; 1.0885/0.21875 = 4.976 → 4: 0.875 (divided by
  // the unrounded 0.21667 it would be 5.02 → 6: the elements are quantised by the e4m3 scale, not the exact one).
  x(0, 16) = 1.3;
  x(0, 17) = 0.5;
  x(0, 18) = 1.0885;
  const Nvfp4 q = nvfp4_quantise(x);
  EXPECT_EQ(q.tensor_scale, 1.0f);
  ASSERT_EQ(q.scales.size(), 3u);
  EXPECT_EQ(decode(Minifloat::e4m3, q.scales[0]), 2.0);
  EXPECT_EQ(decode(Minifloat::e4m3, q.scales[1]), 0.21875);
  EXPECT_EQ(decode(Minifloat::e4m3, q.scales[2]), 448.0);
  const Matrix<double> d = nvfp4_dequantise(q);
  EXPECT_EQ(d(0, 0), 12.0);
  EXPECT_EQ(d(0, 1), 3.0);
  EXPECT_EQ(d(0, 2), 1.0);
  EXPECT_EQ(d(0, 3), 1.0);
  EXPECT_EQ(d(0, 16), 1.3125);
  EXPECT_EQ(d(0, 17), 0.4375);
  EXPECT_EQ(d(0, 18), 0.875);
  EXPECT_EQ(d(0, 40), 2688.0);
  EXPECT_EQ(d(0, 30), 0.0);
}

TEST(BlockQuant, NonFiniteInputIsRefused) {
  Matrix<double> x = Matrix<double>::Ones(1, 4);
  x(0, 2) = std::nan("");
  EXPECT_THROW(mxfp4_quantise(x), std::invalid_argument);
  EXPECT_THROW(nvfp4_quantise(x), std::invalid_argument);
  EXPECT_THROW(fp8_fake_quant_blocks(x), std::invalid_argument);
}

}  // namespace
}  // namespace moe
