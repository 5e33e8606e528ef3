// `moe-oracle quant` — are FP4 weights exactly FP8? DeepSeek-V4 ships its routed experts in MXFP4 (e2m1 elements,
// one e8m0 scale per 1×32 sub-block), and FP8 kernels want e4m3 elements with one scale per 128×128 tile.
//   moe-oracle quant                 the census (reference/fp4_to_fp8.hpp): which (code, scale) pairs survive the
//                                    move into a tile, for MXFP4 under a power-of-two tile scale and under
//                                    DeepSeek-V3's amax/448, and for NVFP4
//   moe-oracle quant --weights W.npy one weight matrix: quantised to MXFP4 as the OCP recipe does
//                                    (reference/block_quant.hpp), its error, and per 128×128 tile whether some
//                                    power-of-two FP8 tile scale holds every dequantised element exactly
// Exit status 1 when a tile of the given weights is not lossless, 2 on bad input.
#include "cli/commands.hpp"
#include "cli/text_format.hpp"
#include "formats/npy.hpp"
#include "reference/block_quant.hpp"
#include "reference/fp4_to_fp8.hpp"
#include "reference/memory_estimate.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

namespace moe::cli {
namespace {

using formats::NpyArray;
using formats::NpyDtype;

struct QuantOptions {
  std::string weights;  // a 2-d .npy (float64, float32, or bfloat16 bits as uint16)
  bool json = false;
};

// Bytes per element `quant --weights` holds at its peak: while judging, the matrix, its MXFP4 codes (1 + 1/32),
// the dequantised copy and two temporaries of the error's norms (33); while reading, the file's bytes, their raw
// copy and the widened values (2·item + 8 <= 24). Measured: 25 an element at peak, 2048 × 2048 float64 or float32.
constexpr std::uint64_t kQuantBytesPerElement = 40;

// The header first (its dtype, shape and the file's size for them), and the memory the shape needs under the one
// budget, before a byte of data is read: a header declaring 2^40 elements is refused, not allocated.
formats::NpyHeader check_weights_header(const std::string& path) {
  const formats::NpyHeader h = formats::read_npy_header_widened(path);
  const NpyArray shape{h.dtype, h.shape, {}, {}, {}};
  if (h.shape.size() != 2 || shape.size() == 0)
    throw std::invalid_argument(path + ": a weight matrix is 2-d with at least one element, got shape " +
                                shape.shape_string());
  if (h.dtype != NpyDtype::f8 && h.dtype != NpyDtype::f4 && h.dtype != NpyDtype::u2)
    throw std::invalid_argument(path + ": weights are float64, float32 or bfloat16 (uint16 bits), got " +
                                std::string(formats::npy_descr(h.dtype)));
  // At most 2^40 elements (the reader's bound), so the product cannot overflow.
  require_memory(static_cast<std::uint64_t>(shape.size()) * kQuantBytesPerElement,
                 path + ": quantising a " + shape.shape_string() + " matrix");
  return h;
}

Matrix<double> read_weights(const std::string& path) {
  const formats::NpyHeader h = check_weights_header(path);
  const NpyArray a = formats::read_npy_widened(path);
  if (a.dtype != h.dtype || a.shape != h.shape)  // the file was replaced between the two reads
    throw std::invalid_argument(path + ": changed while it was read (header " +
                                NpyArray{h.dtype, h.shape, {}, {}, {}}.shape_string() + ", data " + a.shape_string() + ")");
  Matrix<double> w(a.shape[0], a.shape[1]);
  for (Eigen::Index i = 0; i < w.size(); ++i) {
    const auto at = static_cast<std::size_t>(i);
    const double v = a.dtype == NpyDtype::u2
                         ? double(std::bit_cast<float>(static_cast<std::uint32_t>(a.integers[at]) << 16))
                         : a.reals[at];
    if (!std::isfinite(v)) throw std::invalid_argument(path + ": element " + std::to_string(i) + " is not finite");
    w(i / w.cols(), i % w.cols()) = v;  // C order
  }
  return w;
}

// Whether every element of the tile [r0, r0+n) × [c0, c0+m) of `v` is v = e4m3(v / 2^j) · 2^j for one j: the
// largest |v| bounds j from below (v / 2^j ≤ 448), the smallest nonzero from above (v / 2^j ≥ 2^−9, e4m3's least
// subnormal), and each j between is tried. Returns that j, or nothing.
std::optional<int> power_of_two_tile_scale(const Matrix<double>& v, Eigen::Index r0, Eigen::Index c0,
                                           Eigen::Index n, Eigen::Index m) {
  const auto tile = v.block(r0, c0, n, m);
  const double largest = tile.cwiseAbs().maxCoeff();
  if (largest == 0) return 0;
  double smallest = largest;
  for (Eigen::Index i = 0; i < tile.size(); ++i)
    if (const double a = std::abs(tile(i % n, i / n)); a > 0) smallest = std::min(smallest, a);
  const int lo = static_cast<int>(std::ceil(std::log2(largest / 448)));
  const int hi = static_cast<int>(std::floor(std::log2(smallest) + 9));
  for (int j = lo; j <= hi; ++j) {
    bool exact = true;
    for (Eigen::Index i = 0; i < tile.size() && exact; ++i) exact = is_e4m3(std::ldexp(tile(i % n, i / n), -j));
    if (exact) return j;
  }
  return std::nullopt;
}

int census(const QuantOptions& o) {
  const auto offsets = mxfp4_offset_census(-10, 8);
  const int spread = mxfp4_largest_lossless_spread();
  const PairCount nv = nvfp4_exact_pairs();
  const PairCount amax = mxfp4_exact_pairs_under_amax_scale();
  if (o.json) {
    nlohmann::json j{{"mxfp4_largest_lossless_spread", spread},
                     {"nvfp4_exact_pairs", {{"exact", nv.exact}, {"total", nv.total}}},
                     {"mxfp4_amax_scale_exact_pairs", {{"exact", amax.exact}, {"total", amax.total}}}};
    for (const OffsetCensus& c : offsets)
      j["mxfp4_offsets"].push_back({{"offset", c.offset}, {"exact", c.exact_codes}});
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::cout << "MXFP4 into FP8 (e4m3, one power-of-two scale 2^j per 128×128 tile): of the 16 e2m1 codes of a "
               "sub-block with e8m0 exponent k, exact at offset k − j:\n";
  TextTable t({"k − j", "exact codes"});
  for (const OffsetCensus& c : offsets) t.add_row({std::to_string(c.offset), std::to_string(c.exact_codes) + " of 16"});
  t.print(std::cout);
  std::cout << "so a tile is lossless when its sub-block exponents spread by at most " << spread << "\n"
            << "MXFP4 under DeepSeek-V3's tile scale amax/448: " << amax.exact << " of " << amax.total
            << " (magnitude, offset) pairs exact: not lossless; the move needs a power-of-two (UE8M0) scale\n"
            << "NVFP4 (an e4m3 scale per 16): " << nv.exact << " of " << nv.total
            << " (magnitude, scale) pairs exact under some power-of-two tile scale: lossy by construction\n";
  return 0;
}

int weights(const QuantOptions& o) {
  const Matrix<double> w = read_weights(o.weights);
  const Matrix<double> fp4 = mxfp4_dequantise(mxfp4_quantise(w));
  const double max_error = (fp4 - w).cwiseAbs().maxCoeff();
  // Both norms of the ratio taken of the matrices scaled by one power of two (exact, and cancelled by the ratio)
  // that brings the largest |w| to [1, 2): near the double range the norm of w itself passes DBL_MAX, even
  // computed stably, and the ratio was inf / inf = -nan (MXFP4 saturates at 6·2^127, so the error is about |w|).
  // (ldexp per element: the factor 2^-e alone would overflow for subnormal weights.)
  const double largest = w.cwiseAbs().maxCoeff();
  const int e = largest > 0 ? std::ilogb(largest) : 0;
  const auto scaled = [e](const Matrix<double>& m) { return m.unaryExpr([e](double x) { return std::ldexp(x, -e); }); };
  const double norm = scaled(w).stableNorm();
  const double relative = norm > 0 ? scaled(fp4 - w).stableNorm() / norm : 0;
  const Eigen::Index tile = kFp8WeightBlock;
  int tiles = 0, lossy = 0;
  std::optional<std::pair<Eigen::Index, Eigen::Index>> first_lossy;
  for (Eigen::Index r = 0; r < w.rows(); r += tile)
    for (Eigen::Index c = 0; c < w.cols(); c += tile) {
      ++tiles;
      if (power_of_two_tile_scale(fp4, r, c, std::min(tile, w.rows() - r), std::min(tile, w.cols() - c))) continue;
      ++lossy;
      if (!first_lossy) first_lossy = {r, c};
    }
  if (o.json) {
    nlohmann::json j{{"weights", o.weights},
                     {"shape", {w.rows(), w.cols()}},
                     {"mxfp4_max_abs_error", max_error},
                     {"mxfp4_relative_error", relative},
                     {"tiles", tiles},
                     {"lossy_tiles", lossy},
                     {"lossless", lossy == 0}};
    if (first_lossy) j["first_lossy_tile"] = {first_lossy->first, first_lossy->second};
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << o.weights << " [" << w.rows() << ", " << w.cols() << "] quantised to MXFP4: max |error| "
              << max_error << ", relative (Frobenius) " << relative << "\n"
              << "into FP8 with a power-of-two scale per 128×128 tile: " << tiles - lossy << " of " << tiles
              << " tiles exact";
    if (first_lossy)
      std::cout << "; NOT lossless, first lossy tile at row " << first_lossy->first << ", column "
                << first_lossy->second << " (its sub-block exponents spread by more than "
                << mxfp4_largest_lossless_spread() << ")";
    std::cout << "\n";
  }
  return lossy == 0 ? 0 : 1;
}

}  // namespace

void add_quant_command(CLI::App& app) {
  auto o = std::make_shared<QuantOptions>();
  auto* cmd = app.add_subcommand(
      "quant", "Are FP4 weights exactly FP8? The census of MXFP4 and NVFP4 codes in FP8 tiles, or one weight "
               "matrix (--weights) quantised to MXFP4 and checked tile by tile");
  cmd->add_option("--weights", o->weights,
                  "a 2-d .npy weight matrix (float64, float32, or bfloat16 bits as uint16): quantise it to MXFP4 and "
                  "say which 128×128 tiles FP8 with a power-of-two scale holds exactly (exit 1 if any does not)");
  cmd->add_flag("--json", o->json, "machine-readable output");
  cmd->callback([o] {
    const int status = o->weights.empty() ? census(*o) : weights(*o);
    if (status != 0) throw CLI::RuntimeError(status);
  });
}

}  // namespace moe::cli
