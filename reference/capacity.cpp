#include "reference/capacity.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace moe {

int expert_capacity(int local_tokens, int topk, int num_experts, double capacity_factor) {
  // Same order of operations as Megatron's get_capacity(num_tokens = T_local·k, E, cf).
  const double tokens_per_expert = static_cast<double>(local_tokens) * topk / num_experts;
  return static_cast<int>(std::ceil(tokens_per_expert * capacity_factor));
}

template <typename T>
CapacityResult apply_capacity(const MoeConfig& config, const BoolMatrix& routed, const Matrix<T>& probs,
                              const std::vector<std::vector<int>>& partition) {
  const auto experts = routed.cols();
  CapacityResult result{routed, BoolMatrix::Constant(routed.rows(), experts, false)};

  for (const std::vector<int>& part : partition) {
    const int local = static_cast<int>(part.size());
    const int cap = expert_capacity(local, config.topk, config.num_experts, *config.capacity_factor);
    for (Eigen::Index e = 0; e < experts; ++e) {
      // Local positions (indices into `part`) routed to e, in local order.
      std::vector<int> rows;
      for (int i = 0; i < local; ++i)
        if (routed(part[static_cast<size_t>(i)], e)) rows.push_back(i);

      if (static_cast<int>(rows.size()) > cap) {
        if (config.drop_policy == DropPolicy::probs) {
          std::stable_sort(rows.begin(), rows.end(), [&](int a, int b) {
            return probs(part[static_cast<size_t>(a)], e) > probs(part[static_cast<size_t>(b)], e);
          });
        }
        for (size_t i = static_cast<size_t>(cap); i < rows.size(); ++i)
          result.keep(part[static_cast<size_t>(rows[i])], e) = false;
      } else if (config.pad_to_capacity) {
        int missing = std::min(cap, local) - static_cast<int>(rows.size());
        for (int i = 0; i < local && missing > 0; ++i) {
          const int row = part[static_cast<size_t>(i)];
          if (routed(row, e)) continue;
          result.padded(row, e) = true;
          --missing;
        }
      }
    }
  }
  return result;
}

CapacityResult replay_capacity(const MoeConfig& config, const BoolMatrix& routed, const BoolMatrix& final_map,
                               const std::vector<std::vector<int>>& partition) {
  if (final_map.rows() != routed.rows() || final_map.cols() != routed.cols())
    throw std::invalid_argument("replayed routing map: shape must be [tokens, num_experts]");
  CapacityResult result{(routed.array() && final_map.array()).matrix(),
                        (final_map.array() && !routed.array()).matrix()};
  for (const std::vector<int>& part : partition) {
    const int local = static_cast<int>(part.size());
    const int cap = expert_capacity(local, config.topk, config.num_experts, *config.capacity_factor);
    for (Eigen::Index e = 0; e < routed.cols(); ++e) {
      int n_routed = 0, kept = 0, padded = 0;
      for (int row : part) {
        n_routed += routed(row, e);
        kept += result.keep(row, e);
        padded += result.padded(row, e);
      }
      const std::string where = "replayed routing map, expert " + std::to_string(e) + ": ";
      if (n_routed > cap && kept != cap)
        throw std::invalid_argument(where + "keeps " + std::to_string(kept) + " of its " + std::to_string(n_routed) +
                                    " routed tokens; an over-full expert keeps exactly its capacity " +
                                    std::to_string(cap));
      if (n_routed <= cap && kept != n_routed)
        throw std::invalid_argument(where + "drops a routed token although the expert is within capacity");
      if (padded > 0 && !config.pad_to_capacity)
        throw std::invalid_argument(where + "holds a token not routed to it, without pad_to_capacity");
      if (config.pad_to_capacity && n_routed < cap && kept + padded != std::min(cap, local))
        throw std::invalid_argument(where + "is padded to " + std::to_string(kept + padded) + " rows, not " +
                                    std::to_string(std::min(cap, local)));
    }
  }
  return result;
}

template CapacityResult apply_capacity<double>(const MoeConfig&, const BoolMatrix&, const Matrix<double>&,
                                               const std::vector<std::vector<int>>&);
template CapacityResult apply_capacity<float>(const MoeConfig&, const BoolMatrix&, const Matrix<float>&,
                                              const std::vector<std::vector<int>>&);

}  // namespace moe
