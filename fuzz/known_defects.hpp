// Inputs that hit a defect already reported and being fixed elsewhere (README.md, "Known defects"). While
// skip_known_defects() is on (the default), the harnesses return early on them, so that a long run measures the
// rest of the reader instead of stopping at the first of these; MOE_FUZZ_KNOWN=hit turns the skipping off. Each
// predicate names its defect and its crasher under crashers/<harness>/known/; delete it with the fix.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <string_view>

namespace moe::fuzz {

// A checkpoint piece's "file" that stays inside the checkpoint folder: a non-empty name of letters, digits and
// ". _ -", not "." or "..". Not a defect filter: also what the checkpoint harness requires of a loaded piece.
bool plain_file_name(std::string_view name);

namespace known {

// npy-empty-memcpy (golden/npy.cpp): a zero-element '<f8' / '<i8' array is memcpy'd into an empty vector's data(),
// a null pointer (UBSan: "null pointer passed as argument 1"). True when the header's shape tuple has a 0.
bool npy_zero_elements(std::string_view bytes);

// model-case-world-overflow (golden/model_case.cpp): ModelCaseHeader::layout() computes world = tp·cp·dp in int
// (UBSan: signed integer overflow) before validate() can refuse the sizes. True for an object whose "layout" has
// integer tp, cp, dp with a product beyond INT_MAX.
bool model_case_world_overflows(const nlohmann::json& root);

// The checkpoint loader (distributed/checkpoint.cpp) takes what checkpoint.json says without checking it:
//   checkpoint-piece-path     "file" is used as a path relative to the folder: "../x" or "/x" is read from anywhere
//   checkpoint-offset-shape   "offset" / "shape" are read as [0] and [1] of whatever array is there (a shorter one
//                             is read past its end), negative values pass the bounds check, huge ones overflow it
//   checkpoint-number-casts   "fnv1a", "optimizer_step", "training_step", "offset", "shape" given as floating-point
//                             numbers are cast to integers (UBSan: float-cast-overflow when out of range)
//   checkpoint-values         piece values are not checked: NaN or ±Inf load, and tid2eid's doubles are cast to
//                             int64 (UB when out of range) and used as expert ids unchecked
// True when the parsed checkpoint.json (discarded when not JSON) or the replaced piece's bytes would hit one.
bool checkpoint_hits_known_defect(const nlohmann::json& meta, std::string_view piece);

}  // namespace known
}  // namespace moe::fuzz
