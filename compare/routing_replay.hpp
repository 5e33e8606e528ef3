// Routing judged as decisions: where a framework's top-k differs from the oracle's only within the rounding of its
// router, its selection is replayed (the oracle takes the framework's experts, computes their weights from the
// logits in double, and everything downstream is judged under that selection); a difference beyond the rounding is
// a real one and fails. This is what Megatron-Core's RouterReplay and R3 do to make two MoE runs comparable, with a
// bound in place of trust.
//
// The bound, per token and expert, of how far the framework's ranking score r_e can be from the oracle's:
//   logit     δl_e = u_r·|l_e| + sqrt(6h)·u_a·‖x ⊙ W_e‖₂      the logit stored in the router's dtype (u_r), and an
//                                                            h-term float sum: the random-rounding model's standard
//                                                            deviation of recursive summation is u_a·sqrt(h/6)·‖terms‖₂
//                                                            (partial sums of random-sign terms), so this is 6σ
//   score     softmax δs_e = s_e·(δl_e + max_j δl_j), sigmoid s(1−s)·δl_e, sqrtsoftplus σ(l)/(2s)·δl_e, each + u_s·s_e
//   ranking   ε_e = δl_e (post-softmax ranks logits), δs_e (+ u_s·|r_e| with an expert bias added)
// u_r = u_s: 2^-8 for a bf16 router weight (its logits are bf16, and its scores may be: transformers' DeepSeek-V4
// gate), 2^-24 for float32; u_a = 2^-24 for both (float accumulation); 2^-53 throughout for a float64 router.
// The framework's set D is a possible top-k of scores within those bounds exactly when
//   min_{e∈D} (r_e + ε_e) ≥ max_{f∉D} (r_f − ε_f)
// among the experts of the kept groups; with group-limited routing the groups D uses must be possible top groups the
// same way (a group's score is the sum of its top k/group_topk ranking scores, its bound the sum of theirs).
#pragma once

#include "reference/config.hpp"
#include "reference/tensor.hpp"
#include "reference/tolerance.hpp"

#include <vector>

namespace moe::compare {

// One row's verdict: the worst pair (e ∈ D ranked below f ∉ D by the oracle), its margin r_f − r_e and the bound
// ε_e + ε_f that rounding allows there. For a group flip, the margin and bound of the worst pair of groups.
struct FlipJudgement {
  bool within_rounding = false;
  double margin = 0;
  double bound = 0;
};

// Token t's bounds ε_e [E] from its input row x [h], the router weight W [E, h], its logits and scores in double.
RowVector<double> ranking_error_bound(const MoeConfig& config, const RowVector<double>& x, const Matrix<double>& router_weight,
                                      const RowVector<double>& logits, const RowVector<double>& scores,
                                      const Vector<double>& expert_bias, Precision router);

// Whether `chosen` (k distinct experts) is a top-k of `ranking` within `bound` (see above).
FlipJudgement judge_flip(const MoeConfig& config, const RowVector<double>& ranking, const RowVector<double>& bound,
                         const std::vector<int>& chosen);

}  // namespace moe::compare
