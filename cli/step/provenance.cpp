#include "cli/step/provenance.hpp"

#include <cmath>
#include <stdexcept>
#include <string>

namespace moe::step {
namespace {

int expert_of_tag(double v) { return static_cast<int>(std::lround(v)) - 1; }

}  // namespace

std::string token_name(int token) {
  if (token < 26) return std::string(1, static_cast<char>('a' + token));
  return "t" + std::to_string(token);
}

TagLayout::TagLayout(int tokens, int experts, int tokens_per_rank)
    : tokens_(tokens), experts_(experts), tokens_per_rank_(tokens_per_rank) {
  if (tokens < 1 || experts < 1 || tokens_per_rank < 1)
    throw std::invalid_argument("step: a tag layout needs at least one token, expert and token per rank");
}

Matrix<double> TagLayout::token_rows(int first, int n) const {
  Matrix<double> tags = Matrix<double>::Zero(n, width());
  for (int i = 0; i < n; ++i) tags(i, first + i) = 1;
  return tags;
}

Matrix<double> TagLayout::expert_probs(const BoolMatrix& map) {
  Matrix<double> p = Matrix<double>::Zero(map.rows(), map.cols());
  for (Eigen::Index t = 0; t < map.rows(); ++t)
    for (Eigen::Index e = 0; e < map.cols(); ++e)
      if (map(t, e)) p(t, e) = static_cast<double>(e + 1);
  return p;
}

int TagLayout::token_of(const Eigen::Ref<const RowVector<double>>& tag) const {
  int found = -1;
  for (int t = 0; t < tokens_; ++t)
    if (tag(t) != 0) {
      if (found >= 0) throw std::logic_error("step: an expert row carries two tokens (rule: one token per expert row)");
      found = t;
    }
  if (found < 0) throw std::logic_error("step: an expert row carries no token (rule: every expert row is a token's copy)");
  return found;
}

Matrix<double> TagLayout::assignment_rows(const Matrix<double>& token_rows, const Vector<double>& expert_probs) const {
  Matrix<double> tags = Matrix<double>::Zero(token_rows.rows(), width());
  for (Eigen::Index r = 0; r < token_rows.rows(); ++r) {
    const int t = token_of(token_rows.row(r));
    const int e = expert_of_tag(expert_probs(r));
    if (e < 0 || e >= experts_) throw std::logic_error("step: an expert row's probability tag names no expert");
    tags(r, tokens_ + Eigen::Index(t) * experts_ + e) = 1;
  }
  return tags;
}

void TagLayout::describe(const Eigen::Ref<const RowVector<double>>& tag,
                         const Eigen::Ref<const RowVector<double>>& tag_probs, TraceRow& row) const {
  for (int t = 0; t < tokens_; ++t)
    if (tag(t) != 0) row.tokens.push_back(t);
  for (int t = 0; t < tokens_; ++t)
    for (int e = 0; e < experts_; ++e)
      if (tag(tokens_ + Eigen::Index(t) * experts_ + e) != 0) {
        row.assignments.push_back({t, e});
        if (row.tokens.empty() || row.tokens.back() != t) row.tokens.push_back(t);
      }
  // Whose probability each entry is: a width-1 one belongs to the row's one expert, a width-E one sits in its
  // expert's column, and a width-L one (Flex) names its expert in the tag (e + 1). Column and assignment are
  // preferred to the tag value because an ETP reduction sums etp copies of a tag.
  for (Eigen::Index i = 0; i < tag_probs.size(); ++i) {
    int e = -1;
    if (tag_probs(i) != 0) {
      if (tag_probs.size() == 1 && row.assignments.size() == 1) e = row.assignments[0].expert;
      else if (tag_probs.size() == experts_) e = static_cast<int>(i);
      else e = expert_of_tag(tag_probs(i));
    }
    row.prob_experts.push_back(e);
  }
  if (row.assignments.empty())
    for (int e : row.prob_experts)
      if (e >= 0) row.experts.push_back(e);
  for (const auto& a : row.assignments) row.experts.push_back(a.expert);
  if (!row.tokens.empty()) row.source_rank = row.tokens.front() / tokens_per_rank_;
  label(row);
}

void TagLayout::label(TraceRow& row) const {
  row.label.clear();
  if (row.tokens.empty()) {
    row.label = "·";
    return;
  }
  for (size_t i = 0; i < row.tokens.size(); ++i) {
    const int t = row.tokens[i];
    std::string part = token_name(t) + "@r" + std::to_string(t / tokens_per_rank_);
    // Summed results join with '+'; the experts a token row is sent for (before any sum) with ','.
    std::string experts;
    const char* sep = row.assignments.empty() ? "," : "+";
    for (const auto& a : row.assignments)
      if (a.token == t) experts += (experts.empty() ? "" : sep) + ("e" + std::to_string(a.expert));
    if (row.assignments.empty())
      for (int e : row.experts) experts += (experts.empty() ? "" : sep) + ("e" + std::to_string(e));
    if (!experts.empty()) part += "→" + experts;
    row.label += (i ? ", " : "") + part;
  }
}

}  // namespace moe::step
