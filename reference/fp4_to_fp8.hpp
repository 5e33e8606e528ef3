// When are FP4 weights exactly FP8? The claim under test (seed 002): V4's MXFP4 weights (e2m1 elements, one e8m0
// scale per 1×32 sub-block) dequantise losslessly into FP8 (e4m3 elements, one scale per 128×128 tile), as long as
// the sub-block scales within a tile do not spread beyond FP8's exponent headroom. Dequantising means: for the
// tile scale S, every element v must equal e4m3(v / S) · S exactly.
//
// The census below enumerates every case instead of arguing: every e2m1 code against every scale offset (MXFP4),
// every e2m1 code against every e4m3 block-scale code (NVFP4), with the tile scale a power of two (a UE8M0 scale)
// or DeepSeek-V3's float amax/448.
#pragma once

#include "reference/minifloat.hpp"

#include <vector>

namespace moe {

// Whether x is an e4m3 value (no rounding, no saturation).
bool is_e4m3(double x);

// MXFP4 with a power-of-two tile scale 2^j: element c of a sub-block with e8m0 exponent k is exact iff
// is_e4m3(e2m1(c) · 2^(k − j)). For each offset d = k − j in [lo, hi], how many of the 16 codes are exact.
struct OffsetCensus {
  int offset = 0;
  int exact_codes = 0;
};
std::vector<OffsetCensus> mxfp4_offset_census(int lo, int hi);

// A tile whose sub-blocks have e8m0 exponents k_1 … k_n, every code present in each: the largest spread
// max k − min k for which some power-of-two tile scale keeps every element exact (searched over every j).
int mxfp4_largest_lossless_spread();

// NVFP4 (e2m1 elements, an e4m3 scale per 1×16 block, the fp32 tensor scale folded into the tile scale): for each
// pair (nonzero e2m1 magnitude, positive finite e4m3 scale code), whether the product is exact in e4m3 under some
// power-of-two tile scale. Returns {exact pairs, all pairs}.
struct PairCount {
  int exact = 0;
  int total = 0;
};
PairCount nvfp4_exact_pairs();

// MXFP4 under DeepSeek-V3's tile scale S = amax/448 (amax the tile's largest |v|), taken exactly (a real number,
// before any rounding of S), for a tile whose largest element is 6 · 2^k: of the pairs (nonzero magnitude, sub-block
// offset d in [−14, 0]), how many come back exact.
PairCount mxfp4_exact_pairs_under_amax_scale();

}  // namespace moe
