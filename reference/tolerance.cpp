#include "reference/tolerance.hpp"

#include "reference/tolerance_names.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace moe {
namespace {

struct Row {
  Compared what;
  Precision precision;
  Tolerance tolerance;
};

// Why each size (docs/numerics.md): double rows allow reassociation only — layouts sum the same terms in other
// orders and the observed error is ~1e-15, so a wrong factor of 1 + 1e-6 still fails; float rows allow 2^-23 per
// operation times the depth of a step's sums; bfloat16 rows allow its 8-bit mantissa.
constexpr Row kRows[] = {
    {Compared::training_step, Precision::float64, {1e-13, 1e-9}},
    {Compared::training_step, Precision::float32, {5e-8, 1e-4}},
    // bf16 storage in float vs the oracle with the same storage in double: the float sums move a value across a bf16
    // rounding boundary now and then, one ulp (2^-8 relative) that later sums carry; an entry that cancels keeps
    // the absolute size of its terms' ulps (docs/model.md, "bf16 storage": worst seen 2.3e-4, an entry of 9e-4).
    {Compared::training_step, Precision::bfloat16, {1e-3, 1e-2}},
    {Compared::layer, Precision::float64, {1e-12, 1e-9}},
    {Compared::layer, Precision::float32, {3e-5, 2e-3}},  // one layer's forward and backward in float, no averaging
    {Compared::golden_case, Precision::float64, {1e-12, 1e-9}},
    {Compared::foreign_dump, Precision::float64, {1e-12, 1e-9}},
    // float32 and bf16 dumps have no row: compare derives each element's allowance from the oracle rerun in the
    // dump's arithmetic (compare/error_model.hpp).
    {Compared::device_kernel, Precision::float64, {1e-12, 1e-10}},
    {Compared::device_kernel, Precision::float32, {1e-5, 1e-4}},
    {Compared::device_kernel, Precision::bfloat16, {3e-2, 3e-2}},  // GEMM outputs and activations stored in bf16
    {Compared::token_movement, Precision::float64, {1e-14, 1e-12}},
    {Compared::token_movement, Precision::float32, {1e-6, 1e-5}},
    {Compared::finite_difference, Precision::float64, {1e-7, 1e-6}},
    // Newton–Schulz's composed quintic has slope Π a_i ≈ 493 at 0: the rounding of a gradient that cancels (relative
    // to its norm) grows that much in the update. Absolute, as a step moves elements by about lr (≤ 0.01 here).
    {Compared::muon_step, Precision::float64, {1e-8, 1e-7}},
};

}  // namespace

std::string_view to_string(Precision precision) { return name_of(precision); }

std::string_view to_string(Compared what) { return name_of(what); }

Precision parse_precision(std::string_view name) { return parse_named<Precision>(name, "precision"); }

Compared parse_compared(std::string_view name) { return parse_named<Compared>(name, "comparison"); }

bool Tolerance::admits(double got, double want) const {
  return std::abs(got - want) <= atol + rtol * std::abs(want);  // false for NaN
}

Tolerance tolerance(Compared what, Precision precision) {
  for (const Row& row : kRows)
    if (row.what == what && row.precision == precision) return row.tolerance;
  throw std::invalid_argument("the tolerance table has no row for " + std::string(to_string(what)) + " in " +
                              std::string(to_string(precision)));
}

}  // namespace moe
