#include "distributed/comm/rank_order_reduction.hpp"

#include <algorithm>
#include <stdexcept>
#include <type_traits>

namespace moe {
namespace {

template <CommElement T>
void reduce(ReduceOp op, std::span<const void* const> inputs, std::int64_t count, T* out) {
  const auto n = std::size_t(count);
  const auto* first = static_cast<const T*>(inputs[0]);
  if (first != out) std::copy(first, first + n, out);
  // Rank-outer loops keep the per-element order (in_0, in_1, …) while streaming each input once.
  for (std::size_t r = 1; r < inputs.size(); ++r) {
    const auto* in = static_cast<const T*>(inputs[r]);
    switch (op) {
      case ReduceOp::sum:
      case ReduceOp::avg:
        for (std::size_t i = 0; i < n; ++i) out[i] += in[i];
        break;
      case ReduceOp::max:
        for (std::size_t i = 0; i < n; ++i) out[i] = std::max(out[i], in[i]);
        break;
      case ReduceOp::min:
        for (std::size_t i = 0; i < n; ++i) out[i] = std::min(out[i], in[i]);
        break;
    }
  }
  if (op == ReduceOp::avg) {
    if constexpr (std::is_floating_point_v<T>) {
      const T ranks = T(inputs.size());
      for (std::size_t i = 0; i < n; ++i) out[i] /= ranks;
    } else {
      throw std::invalid_argument("reduce: ReduceOp::avg needs a floating-point element type");
    }
  }
}

}  // namespace

void reduce_in_rank_order(ElementType type, ReduceOp op, std::span<const void* const> inputs, std::int64_t count,
                          void* out) {
  if (inputs.empty() || count == 0) return;
  visit_element_type(type, [&]<typename T>() { reduce<T>(op, inputs, count, static_cast<T*>(out)); });
}

}  // namespace moe
