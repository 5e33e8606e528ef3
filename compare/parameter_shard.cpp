#include "compare/parameter_shard.hpp"

#include <stdexcept>

namespace moe::compare {

namespace {

bool contains(const std::string& stem, const char* part) { return stem.find(part) != std::string::npos; }

}  // namespace

ParameterShard parameter_shard(const std::string& stem, const ProcessGroups& groups, int rank) {
  const ParallelLayout& l = groups.layout();
  const int tp_rank = groups.rank_in(GroupKind::tp, rank), etp_rank = groups.rank_in(GroupKind::expt_tp, rank);
  if (stem == "embedding" || stem == "head") return {Split::rows, l.tp, tp_rank};
  if (contains(stem, ".expert_fc1")) return {Split::glu_rows, l.etp, etp_rank};
  if (contains(stem, ".expert_fc2")) return {Split::columns, l.etp, etp_rank};
  if (contains(stem, ".shared_fc1")) return {Split::glu_rows, l.tp, tp_rank};
  if (contains(stem, ".shared_fc2")) return {Split::columns, l.tp, tp_rank};
  // Attention: q by heads, k and v by key/value groups (each rank's contiguous heads), the output by its columns.
  if (contains(stem, ".attention_wq") || contains(stem, ".attention_wk") || contains(stem, ".attention_wv"))
    return {Split::rows, l.tp, tp_rank};
  if (contains(stem, ".attention_wo")) return {Split::columns, l.tp, tp_rank};
  if (contains(stem, ".eh_proj")) return {Split::rows, l.tp, tp_rank};  // an MTP depth's column-parallel projection
  return {};
}

std::vector<std::int64_t> shard_shape(const std::vector<std::int64_t>& whole, const ParameterShard& s) {
  if (s.split == Split::whole || s.parts == 1) return whole;
  if (whole.size() != 2) throw std::invalid_argument("a split parameter has two dimensions");
  const std::int64_t rows = whole[0], cols = whole[1];
  // glu_rows splits each half, so each half's rows must divide (the layout's sharding rules checked that).
  const std::int64_t unit = s.split == Split::glu_rows ? 2 * s.parts : s.parts;
  if ((s.split == Split::columns ? cols : rows) % unit != 0)
    throw std::invalid_argument("a parameter of " + std::to_string(rows) + "×" + std::to_string(cols) +
                                " does not split into " + std::to_string(s.parts) + " shards");
  if (s.split == Split::columns) return {rows, cols / s.parts};
  return {rows / s.parts, cols};
}

std::vector<double> take_shard(const std::vector<double>& values, const std::vector<std::int64_t>& whole,
                               const ParameterShard& s) {
  if (s.split == Split::whole || s.parts == 1) return values;
  const std::vector<std::int64_t> shape = shard_shape(whole, s);
  const std::int64_t cols = whole[1], rows = shape[0], width = shape[1];
  std::vector<double> out;
  out.reserve(static_cast<size_t>(rows * width));
  // The whole rows the shard's row r comes from: contiguous blocks, or for glu_rows the gate half's block then the
  // up half's (each half of whole[0]/2 rows).
  const auto source_row = [&](std::int64_t r) {
    if (s.split == Split::rows) return s.index * rows + r;
    if (s.split == Split::columns) return r;
    const std::int64_t half = rows / 2, half_whole = whole[0] / 2;
    return r < half ? s.index * half + r : half_whole + s.index * half + (r - half);
  };
  const std::int64_t first_col = s.split == Split::columns ? s.index * width : 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t from = source_row(r) * cols + first_col;
    out.insert(out.end(), values.begin() + from, values.begin() + from + width);
  }
  return out;
}

}  // namespace moe::compare
