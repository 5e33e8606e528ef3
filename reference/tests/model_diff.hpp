// The largest difference between two gradients (or parameter sets) of a model, over every trained tensor.
#pragma once

#include "reference/model.hpp"

#include <algorithm>
#include <cmath>

namespace moe::test {

inline double max_grad_diff(const ModelConfig& c, ModelParams<double> a, ModelParams<double> b) {
  const auto ta = trained_tensors(c, a);
  const auto tb = trained_tensors(c, b);
  double d = 0;
  for (size_t i = 0; i < ta.size(); ++i)
    for (Eigen::Index j = 0; j < ta[i].size; ++j) d = std::max(d, std::abs(ta[i].data[j] - tb[i].data[j]));
  return d;
}

}  // namespace moe::test
