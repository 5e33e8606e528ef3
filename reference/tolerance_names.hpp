// The names of the tolerance table's two keys as tables (reference/named.hpp), for the readers of formats and the
// command line: the precisions in order from the tightest tolerance to the loosest, and what is compared. Kept apart
// from tolerance.hpp, which every layer includes, so that a reader's use of the tables touches only its own files.
#pragma once

#include "reference/named.hpp"
#include "reference/tolerance.hpp"

#include <span>

namespace moe {

inline constexpr Named<Precision> kPrecisionNames[] = {
    {Precision::float64, "float64"}, {Precision::float32, "float32"}, {Precision::bfloat16, "bfloat16"}};
constexpr std::span<const Named<Precision>> names_of(Precision) { return kPrecisionNames; }

// Whether a's tolerance is looser than b's (a later precision in the enum is looser).
constexpr bool looser_than(Precision a, Precision b) { return static_cast<int>(a) > static_cast<int>(b); }

inline constexpr Named<Compared> kComparedNames[] = {
    {Compared::training_step, "training_step"},   {Compared::layer, "layer"},
    {Compared::golden_case, "golden_case"},       {Compared::foreign_dump, "foreign_dump"},
    {Compared::device_kernel, "device_kernel"},   {Compared::token_movement, "token_movement"},
    {Compared::finite_difference, "finite_difference"}, {Compared::muon_step, "muon_step"}};
constexpr std::span<const Named<Compared>> names_of(Compared) { return kComparedNames; }

}  // namespace moe
