// How far a correct run in a lower precision may be from the double oracle: per element, and per tensor as a whole.
//
// The rounding oracle (dump_oracle.hpp) is the oracle run a second time in the dump's arithmetic: float sums, bf16
// storage at the model's storage points when the arrays are bf16, the router's logits stored in bf16 when its weight
// is bf16, on the same inputs and under the same routing decisions. d = rounding oracle − double oracle is one
// sample of what a correct run's rounding does to each element: it grows with the number of terms a value sums and
// with their size, and cancels where they cancel, because it is made by the same sums (docs/numerics.md,
// "Dumps in float32 and bf16").
//
// Element i of a tensor passes when
//     |got_i − want_i| ≤ F·z(n)·(|d_i| + spread(d)) + 2u·|want_i| + u·rms(want)
// with u the unit roundoff of the dump's precision (2^-24 float32, 2^-8 bfloat16), F = kRoundingFactor, z(n) the
// size of the largest of the tensor's n elements' noise in standard deviations, and spread the rms of d clipped at 6
// times itself. n, spread and rms count only the elements that carry rounding: a structural zero (0 in both oracles,
// as the probabilities of the experts a token did not select) would dilute them. Every term scales with the tensor:
// no floor is tied to the size of dL/dy.
//
// A tensor also fails when it is systematically off: got − want ≈ β·want fitted by least squares, its standard error
// from the scatter of the fit over contiguous blocks of elements (so correlated rounding along a row counts), and
// |β| beyond both kSigmas standard errors and the precision's floor. A 1% scale on one expert's gradient in bf16 is
// within every element's allowance and hundreds of standard errors away.
#pragma once

#include "reference/tolerance.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace moe::compare {

// How much larger a correct framework's rounding noise may be than the rounding oracle's: it rounds at more points
// (transformers' eager experts round silu(gate), its product with up, the product with the weight and each expert's
// addition apart; torch's float GEMMs sum in another order). Measured on transformers 5.25 blocks at widths up to
// 1024 (docs/numerics.md): the largest element reached 0.88 of the allowance at 4 (one expert of 64 in bf16 with a
// float32 router), the rest of that block 0.52; 6 keeps the largest at about 0.6.
inline constexpr double kRoundingFactor = 6.0;
// An element's allowance is kRoundingFactor · z(n) · (|d_i| + spread(d)): z(n) = sqrt(2 ln n), at least 2, is about
// the largest of n draws of a standard normal, so a tensor of a million elements, whose largest rounding error is
// some 5 standard deviations out, is not failed for being large.
double extreme_of(std::size_t n);
// The same for a 2-D tensor that sums `rows` outer products g_t ⊗ u_t over token rows (a weight's gradient: an
// expert's is made of the rows routed to it). With few rows it is nearly rank one, and its largest element is the
// product of two maxima, about z(a)·z(b) standard deviations for an [a, b] tensor of one row (11.6 for [128, 1024],
// against z(n) = 4.9), which the rows' sum brings down as 1/sqrt(rows); never below z(n).
double extreme_of_sum(std::size_t n, const std::vector<std::int64_t>& shape, std::int64_t rows);
// How many standard errors a fitted scale must be away from 1 to be a systematic error.
inline constexpr double kSigmas = 6.0;

// The unit roundoff of a precision: 2^-53, 2^-24, 2^-8.
double unit_roundoff(Precision precision);

// The rms of d over its elements within 6 times the rms, repeated until it settles (sigma clipping): a few elements
// whose rounding flipped a discrete decision (a pre-activation rounded onto the SwiGLU clamp's limit passes no
// gradient) are covered by their own |d_i| without loosening the whole tensor.
double clipped_rms(const std::vector<double>& d);

// Each element's allowance |got − want| may reach, from the double oracle's values and the rounding oracle's; shape
// and rows (the token rows a weight gradient sums, 0 when unknown) choose z (extreme_of_sum).
std::vector<double> element_allowance(const std::vector<double>& want, const std::vector<double>& rounded,
                                      Precision precision, const std::vector<std::int64_t>& shape = {},
                                      std::int64_t rows = 0);

// got − want ≈ β·want: the fitted β and its standard error from the scatter over blocks.
struct ScaleFit {
  double beta = 0;
  double sigma = 0;  // standard error of beta
  int blocks = 0;    // 0: too few elements (or want all zero) to fit
  double floor = 0;  // the precision's floor: |β| at or below it is never systematic

  double sigmas() const;     // |β| / σ (∞ when σ = 0 and β ≠ 0)
  bool systematic() const;   // |β| > floor and |β| > kSigmas·σ
  double scale() const { return 1.0 + beta; }
};

// The floor of |β| for a tensor made of `rows` token rows: the larger of
//   - the precision's own: one unit roundoff of bf16 (0.39%: a 1% scale is 2.6 of it), 2^-20 for float32 (a
//     framework's own correct formula may differ from the oracle's by an ulp or so in the same direction
//     everywhere), 1e-9 for float64;
//   - kSigmas·u/sqrt(rows): what rounding that moves a whole row's contribution together (its weight rounded to bf16,
//     say, up to u relative) can add up to over that many rows. The blocks of a tensor share its rows (an expert's
//     gradient is a sum over its tokens, each block a slice of every token's part), so the blocks' scatter cannot
//     see this; an expert that received 3 tokens in bf16 cannot be told 1% off, one that received 128 can.
double scale_floor(Precision precision, std::int64_t rows);

ScaleFit fit_scale(const std::vector<double>& got, const std::vector<double>& want, Precision precision,
                   std::int64_t rows);

// "1.010× the oracle's, 12σ" (the scale to 4 significant digits, the number of standard errors).
std::string describe_scale(const ScaleFit& fit);

}  // namespace moe::compare
