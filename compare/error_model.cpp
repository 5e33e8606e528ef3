#include "compare/error_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace moe::compare {

double unit_roundoff(Precision precision) {
  switch (precision) {
    case Precision::float64: return std::ldexp(1.0, -53);
    case Precision::float32: return std::ldexp(1.0, -24);
    case Precision::bfloat16: return std::ldexp(1.0, -8);
  }
  return 0;
}

namespace {

// clipped_rms over the elements i for which counted(i) holds.
template <typename Counted>
double clipped_rms_of(const std::vector<double>& d, Counted counted) {
  constexpr double kClip = 6.0;
  constexpr int kRounds = 4;
  double limit = std::numeric_limits<double>::infinity(), rms = 0;
  for (int round = 0; round < kRounds; ++round) {
    double sum_sq = 0;
    size_t kept = 0;
    for (size_t i = 0; i < d.size(); ++i)
      if (counted(i) && std::abs(d[i]) <= limit) {
        sum_sq += d[i] * d[i];
        ++kept;
      }
    const double next = kept == 0 ? 0.0 : std::sqrt(sum_sq / static_cast<double>(kept));
    if (round > 0 && next == rms) break;
    rms = next;
    limit = kClip * rms;
  }
  return rms;
}

}  // namespace

double clipped_rms(const std::vector<double>& d) {
  return clipped_rms_of(d, [](size_t) { return true; });
}

double extreme_of(std::size_t n) {
  return std::max(2.0, std::sqrt(2.0 * std::log(static_cast<double>(std::max<std::size_t>(n, 1)))));
}

double extreme_of_sum(std::size_t n, const std::vector<std::int64_t>& shape, std::int64_t rows) {
  const double z = extreme_of(n);
  if (shape.size() != 2 || rows <= 0) return z;
  const double outer = extreme_of(static_cast<std::size_t>(shape[0])) * extreme_of(static_cast<std::size_t>(shape[1]));
  return std::max(z, outer / std::sqrt(static_cast<double>(rows)));
}

std::vector<double> element_allowance(const std::vector<double>& want, const std::vector<double>& rounded,
                                      Precision precision, const std::vector<std::int64_t>& shape,
                                      std::int64_t rows) {
  const size_t n = want.size();
  const double u = unit_roundoff(precision);
  // The elements that carry rounding: an element exactly zero in both oracles is a structural zero (an expert a token
  // did not select has probability 0 in any arithmetic), and counting it would shrink the tensor's spread and rms by
  // the square root of its sparsity (router.probs: E/k).
  const auto live = [&](size_t i) { return want[i] != 0 || rounded[i] != 0; };
  std::vector<double> d(n);
  double want_sq = 0;
  size_t carrying = 0;
  for (size_t i = 0; i < n; ++i) {
    d[i] = rounded[i] - want[i];
    want_sq += want[i] * want[i];
    carrying += live(i) ? 1 : 0;
  }
  const double spread = clipped_rms_of(d, live);
  const double scale_floor = carrying == 0 ? 0.0 : u * std::sqrt(want_sq / static_cast<double>(carrying));
  const double factor = kRoundingFactor * extreme_of_sum(carrying, shape, rows);
  for (size_t i = 0; i < n; ++i) d[i] = factor * (std::abs(d[i]) + spread) + 2 * u * std::abs(want[i]) + scale_floor;
  return d;
}

double scale_floor(Precision precision, std::int64_t rows) {
  double own = 0;
  switch (precision) {
    case Precision::float64: own = 1e-9; break;
    case Precision::float32: own = std::ldexp(1.0, -20); break;
    case Precision::bfloat16: own = std::ldexp(1.0, -8); break;
  }
  const double per_row = kSigmas * unit_roundoff(precision) / std::sqrt(static_cast<double>(std::max<std::int64_t>(rows, 1)));
  return std::max(own, per_row);
}

double ScaleFit::sigmas() const {
  if (sigma > 0) return std::abs(beta) / sigma;
  return beta == 0 ? 0.0 : std::numeric_limits<double>::infinity();
}

bool ScaleFit::systematic() const { return blocks > 0 && std::abs(beta) > floor && sigmas() > kSigmas; }

// β = Σ_b N_b / Σ_b D_b with N_b = ⟨got − want, want⟩ and D_b = ⟨want, want⟩ over block b; its variance is that of
// a ratio estimator, B/(B−1)·Σ_b (N_b − β·D_b)² / (Σ_b D_b)²: each block's share of the residual that β does not
// explain. Blocks are contiguous runs of the flattened tensor (C order), so they are whole rows or runs of rows.
ScaleFit fit_scale(const std::vector<double>& got, const std::vector<double>& want, Precision precision,
                   std::int64_t rows) {
  constexpr size_t kMaxBlocks = 64, kMinBlocks = 8, kMinPerBlock = 16;
  ScaleFit fit;
  fit.floor = scale_floor(precision, rows);
  const size_t n = want.size();
  const size_t blocks = std::min(kMaxBlocks, n / kMinPerBlock);
  if (blocks < kMinBlocks) return fit;
  std::vector<double> num(blocks, 0.0), den(blocks, 0.0);
  for (size_t b = 0; b < blocks; ++b) {
    const size_t begin = n * b / blocks, end = n * (b + 1) / blocks;
    for (size_t i = begin; i < end; ++i) {
      if (!std::isfinite(got[i])) return fit;  // the elements fail already; a fit says nothing more
      num[b] += (got[i] - want[i]) * want[i];
      den[b] += want[i] * want[i];
    }
  }
  double total_num = 0, total_den = 0;
  size_t used = 0;
  for (size_t b = 0; b < blocks; ++b) {
    total_num += num[b];
    total_den += den[b];
    used += den[b] > 0;
  }
  if (total_den <= 0 || used < kMinBlocks) return fit;
  fit.beta = total_num / total_den;
  double scatter = 0;
  for (size_t b = 0; b < blocks; ++b) scatter += (num[b] - fit.beta * den[b]) * (num[b] - fit.beta * den[b]);
  const auto B = static_cast<double>(blocks);
  fit.sigma = std::sqrt(B / (B - 1) * scatter) / total_den;
  fit.blocks = static_cast<int>(blocks);
  return fit;
}

std::string describe_scale(const ScaleFit& fit) {
  char buf[96];
  const double s = fit.sigmas();
  if (std::isinf(s)) std::snprintf(buf, sizeof buf, "%.4f× the oracle's, exactly", fit.scale());
  else std::snprintf(buf, sizeof buf, "%.4f× the oracle's, %.0fσ", fit.scale(), s);
  return buf;
}

}  // namespace moe::compare
