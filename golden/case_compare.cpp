#include "golden/case_compare.hpp"

#include "golden/case_files.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace moe::golden {
namespace {

// The larger error, NaN as the worst of all: std::max(0.0, NaN) is 0, which printed a NaN as max_abs 0.
double worst(double current, double err) {
  return std::isnan(current) || std::isnan(err) ? std::numeric_limits<double>::quiet_NaN() : std::max(current, err);
}

}  // namespace

std::vector<TensorComparison> compare_tensors(const std::vector<std::string>& names,
                                              const std::map<std::string, formats::NpyArray>& expected,
                                              const std::map<std::string, formats::NpyArray>& computed,
                                              const Tolerance& tol) {
  std::vector<TensorComparison> result;
  for (const auto& name : names) {
    const auto it = computed.find(name);
    if (it == computed.end()) throw CaseFormatError("the oracle produced no '" + name + "'");
    const formats::NpyArray& ref = expected.at(name);
    if (it->second.shape != ref.shape) {
      throw CaseFormatError("'" + name + "': computed shape " + it->second.shape_string() + " vs case " +
                            ref.shape_string());
    }
    check_finite(name, ref, "expected tensor");
    const std::vector<double> a = it->second.as_doubles(), b = ref.as_doubles();
    TensorComparison cmp{name};
    for (std::size_t i = 0; i < b.size(); ++i) {
      const double err = std::abs(a[i] - b[i]);  // inf or NaN when the computed value is
      cmp.max_abs = worst(cmp.max_abs, err);
      if (b[i] != 0) {
        cmp.max_rel = worst(cmp.max_rel, err / std::abs(b[i]));
      } else if (!(err == 0)) {
        cmp.max_rel = worst(cmp.max_rel, std::isnan(err) ? err : std::numeric_limits<double>::infinity());
      }
      if (!tol.admits(a[i], b[i])) ++cmp.failing;  // NaN fails too
    }
    result.push_back(cmp);
  }
  return result;
}

std::vector<TensorComparison> compare_outputs(const GoldenCase& expected,
                                              const std::map<std::string, formats::NpyArray>& computed) {
  return compare_tensors(output_tensor_names(expected.header.config), expected.tensors, computed,
                         expected.header.tolerance);
}

}  // namespace moe::golden
