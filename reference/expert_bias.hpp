// Auxiliary-loss-free balancing (DeepSeek, "loss-free balancing" Alg. 1; Megatron's get_updated_expert_bias):
//   β_e ← β_e + rate · sign(mean(c) − c_e)
// c = real assignments per expert after capacity dropping, summed over tp×dp×cp and the global batch; padded
// tokens and padded capacity slots excluded. Underloaded experts gain bias, overloaded ones lose it; sign(0) = 0.
#pragma once

#include "reference/tensor.hpp"

#include <cstdint>
#include <stdexcept>
#include <vector>

namespace moe {

template <typename T>
Vector<T> updated_expert_bias(const Vector<T>& bias, const std::vector<std::int64_t>& counts, double rate) {
  if (static_cast<Eigen::Index>(counts.size()) != bias.size())
    throw std::invalid_argument("expert bias update: counts must have one entry per expert");
  double total = 0;
  for (auto c : counts) total += static_cast<double>(c);
  const double mean = total / static_cast<double>(counts.size());
  Vector<T> updated = bias;
  for (Eigen::Index e = 0; e < bias.size(); ++e) {
    const double offset = mean - static_cast<double>(counts[static_cast<size_t>(e)]);
    const double sign = offset > 0 ? 1.0 : (offset < 0 ? -1.0 : 0.0);
    updated(e) += static_cast<T>(rate * sign);
  }
  return updated;
}

}  // namespace moe
