// Provenance by tags: the stepper runs the same dispatcher twice on the same routing map, once on the real token
// rows and once on *tag* rows that say where each row came from. Whatever the dispatcher does to the data it does
// to the tags (copies per expert, exchanges, sorts, sums), so row i of any tag buffer names the tokens and
// (token, expert) assignments that row i of the data buffer carries. No separate model of the dispatcher is needed.
//
// Tag rows are [T + T·E] wide (T tokens of the whole world, E experts):
//   columns [0, T)            one-hot token t           (token rows: what the dispatch moves)
//   columns T + t·E + e       one-hot assignment (t, e) (expert results: what the combine moves and sums)
// and the probabilities of the tag pass are e + 1 at each selected (t, e), so a moved probability names its expert.
#pragma once

#include "cli/step/step_trace.hpp"
#include "reference/tensor.hpp"

namespace moe::step {

class TagLayout {
 public:
  TagLayout(int tokens, int experts, int tokens_per_rank);

  Eigen::Index width() const { return Eigen::Index(tokens_) * (1 + experts_); }

  // [n, width]: one-hot token rows for tokens first … first + n − 1.
  Matrix<double> token_rows(int first, int n) const;
  // [n, E]: e + 1 where the routing map selects (t, e), else 0.
  static Matrix<double> expert_probs(const BoolMatrix& map);
  // The tag of an expert's result: one-hot assignment (token of `token_row`, expert of `expert_prob`), per row.
  Matrix<double> assignment_rows(const Matrix<double>& token_rows, const Vector<double>& expert_probs) const;

  // Fills label, source_rank, tokens, experts, assignments and prob_experts of `row` from its tag row and the tag
  // row of its probabilities (size 0 when the stage moved none).
  void describe(const Eigen::Ref<const RowVector<double>>& tag, const Eigen::Ref<const RowVector<double>>& tag_probs,
                TraceRow& row) const;
  // Sets row.label from its tokens, experts and assignments.
  void label(TraceRow& row) const;

 private:
  int token_of(const Eigen::Ref<const RowVector<double>>& tag) const;  // the one token column set; throws otherwise

  int tokens_, experts_, tokens_per_rank_;
};

}  // namespace moe::step
