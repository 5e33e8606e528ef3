// The router of one rank, on its local (SP/CP-split) tokens — the production path, written independently of the
// oracle's reference/router (whole-matrix Eigen array code instead of per-token loops), so that comparing the
// two means something.
//
// Capacity is computed on exactly these local tokens (one source rank). The statistics of the aux losses are
// reduced over their groups by the caller (distributed/router_statistics); here everything is local.
#pragma once

#include "reference/config.hpp"
#include "reference/tensor.hpp"

#include <cstdint>
#include <vector>

namespace moe::dist {

template <typename T>
struct LocalRouting {
  Matrix<T> logits;        // [n, E]
  Matrix<T> scores;        // [n, E]
  IndexMatrix topk;        // [n, k] selected experts (selection order)
  Matrix<T> probs;         // [n, E] after capacity
  BoolMatrix routing_map;  // [n, E] after capacity, padded slots included
  BoolMatrix padded;       // [n, E] slots added by pad_to_capacity
  std::vector<std::int64_t> assignments;  // [E] real assignments after dropping, padded tokens excluded
};

struct RouterInputs {
  IndexVector token_ids;            // [n] (hash layers), the input id of each local row
  std::vector<bool> padding_mask;   // [n], true = padded token; empty = none
};

template <typename T>
LocalRouting<T> route_local(const MoeConfig& config, const Matrix<T>& x, const Matrix<T>& router_weight,
                            const Vector<T>& expert_bias, const IndexMatrix& tid2eid, const RouterInputs& in);

// dL/dlogits from dL/dscores, whole matrices (softmax, sigmoid, sqrt(softplus) with torch's threshold).
template <typename T>
Matrix<T> score_backward(ScoreFunction f, const Matrix<T>& logits, const Matrix<T>& scores,
                         const Matrix<T>& grad_scores);

// dL/dlogits [n, E] from dL/dprobs [n, E] (dropped and padded slots carry none).
template <typename T>
Matrix<T> route_local_backward(const MoeConfig& config, const LocalRouting<T>& routing, const Matrix<T>& grad_probs);

}  // namespace moe::dist
