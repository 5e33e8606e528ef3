// Comparing computed output tensors with a case's expected ones: per tensor, the largest absolute and relative
// error and whether every element meets |a − b| ≤ atol + rtol·|ref| (ref = the case's value). Integer and
// boolean tensors go through the same rule, so with atol < 1 they must match exactly.
#pragma once

#include "golden/golden_case.hpp"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace moe::golden {

struct TensorComparison {
  std::string name;
  double max_abs = 0;        // NaN when a computed value is NaN, inf when one is ±inf
  double max_rel = 0;        // over elements with ref ≠ 0; +inf when a zero reference is missed (NaN as max_abs)
  std::int64_t failing = 0;  // elements outside the tolerance
  bool pass() const { return failing == 0; }
};

// One entry per name, in order. A computed tensor that is missing or has another shape, and an expected tensor
// holding a NaN or ±inf (check_finite), are errors (CaseFormatError), not failures to report.
std::vector<TensorComparison> compare_tensors(const std::vector<std::string>& names,
                                              const std::map<std::string, formats::NpyArray>& expected,
                                              const std::map<std::string, formats::NpyArray>& computed,
                                              const Tolerance& tolerance);

// A layer case: one entry per output tensor, in output_tensor_names order.
std::vector<TensorComparison> compare_outputs(const GoldenCase& expected,
                                              const std::map<std::string, formats::NpyArray>& computed);

}  // namespace moe::golden
