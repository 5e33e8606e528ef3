// The FP4 → FP8 census (reference/fp4_to_fp8.hpp) against counts worked out by hand from the formats:
// e2m1 magnitudes are 1·2^t (0.5, 1, 2, 4) or 1.5·2^t (1.5, 3, 6); e4m3 holds 1·2^e for e in [−9, 8] and
// 1.5·2^e for e in [−8, 8] (3·2^−9 is its subnormal 3; 1.5·2^−9 would need a quantum of 2^−10; 1.5·2^9 = 768 > 448).
#include "reference/fp4_to_fp8.hpp"

#include <gtest/gtest.h>

namespace moe {
namespace {

// Offset d = k − j: 0.5·2^d needs d − 1 ≥ −9 and 6·2^d = 1.5·2^(d+2) needs d + 2 ≤ 8, so d in [−8, 6] keeps all 16
// codes. At d = −9: 0.5 and 1.5 fall below the quantum, the other 5 magnitudes (×2 signs) and ±0 stay: 12. At
// d = −10 only 2, 4, 6 (= 2^−9, 2^−8, 3·2^−9) stay: 8. At d = 7: 4 and 6 pass 448 (512, 768): 12. At d = 8: 0.5, 1
// and 1.5 stay (128, 256, 384): 8.
TEST(Fp4ToFp8, MxFp4OffsetsByHand) {
  for (const OffsetCensus& c : mxfp4_offset_census(-10, 8)) {
    const int want = c.offset >= -8 && c.offset <= 6 ? 16 : c.offset == -9 || c.offset == 7 ? 12 : 8;
    EXPECT_EQ(c.exact_codes, want) << "offset " << c.offset;
  }
}

// One power-of-two tile scale serves offsets −8 … 6: sub-block exponents may spread by 14, not 15.
TEST(Fp4ToFp8, MxFp4TileLosslessUpToASpreadOf14) { EXPECT_EQ(mxfp4_largest_lossless_spread(), 14); }

// NVFP4: e2m1 × e4m3 scale. Significand 1 times any scale keeps the scale's bits: 4 magnitudes × 126 scales = 504.
// Significand 1.5 times a normal scale 1.m keeps ≤ 4 significant bits only for m ∈ {0, 2, 4} (8·3 = 24, 10·3 = 30,
// 12·3 = 36; 27, 33, 39, 42, 45 need 5 or 6): 15 binades × 3 = 45; times a subnormal scale m·2^−9 for m = 1 … 6
// (3, 6, 9, 12, 15, 18), not 7 (21 = 10101b): 6. So 3 × 51 = 153, and 657 of 7 × 126 = 882 pairs in all.
TEST(Fp4ToFp8, NvFp4PairsByHand) {
  const PairCount c = nvfp4_exact_pairs();
  EXPECT_EQ(c.total, 882);
  EXPECT_EQ(c.exact, 657);
}

// DeepSeek-V3's S = amax/448 with amax = 6·2^k: v·2^d·224/3 is dyadic only for v ∈ {1.5, 3, 6}; then it is
// 112·2^d, 224·2^d, 448·2^d = 1.75·2^(6+d), 1.75·2^(7+d), 1.75·2^(8+d), which e4m3 holds down to 7·2^−9
// (= 1.75·2^−7): d ≥ −13, −14, −14. So 14 + 15 + 15 = 44 of 7 × 15 = 105, and never for 0.5, 1, 2, 4.
TEST(Fp4ToFp8, MxFp4UnderAmaxScaleByHand) {
  const PairCount c = mxfp4_exact_pairs_under_amax_scale();
  EXPECT_EQ(c.total, 105);
  EXPECT_EQ(c.exact, 44);
}

}  // namespace
}  // namespace moe
