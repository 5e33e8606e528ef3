#include "cli/step/text_view.hpp"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

namespace moe::step {
namespace {

using Lines = std::vector<std::string>;

size_t display_width(const std::string& s) {
  return static_cast<size_t>(std::count_if(s.begin(), s.end(), [](char c) { return (c & 0xC0) != 0x80; }));
}

std::string fixed(double v, const char* format) {
  char buf[32];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string list(const std::vector<std::int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

std::string values(const std::vector<double>& v, int max_values) {
  std::string s;
  const size_t shown = std::min(v.size(), static_cast<size_t>(max_values));
  for (size_t i = 0; i < shown; ++i) s += (i ? " " : "") + fixed(v[i], "%+.3f");
  if (shown < v.size()) s += " …";
  return s;
}

// "p .512" for a row's one probability, "p e0 .512 e2 .488" for several; "dg" in the backward.
std::string probs(const TraceRow& row, bool backward) {
  if (row.probs.empty()) return "";
  const std::string name = backward ? "dg" : "p";
  if (row.probs.size() == 1) return name + " " + fixed(row.probs[0], "%.3f");
  std::string s;
  for (size_t i = 0; i < row.probs.size(); ++i)
    if (i < row.prob_experts.size() && row.prob_experts[i] >= 0)
      s += " e" + std::to_string(row.prob_experts[i]) + " " + fixed(row.probs[i], "%.3f");
  return s.empty() ? s : name + s;
}

Lines routing_lines(const RankStage& s) {
  Lines lines{"rank " + std::to_string(s.rank) + "  " + std::to_string(s.routing.size()) + " tokens"};
  for (const RoutedToken& t : s.routing) {
    std::string line = t.label;
    if (t.input_id >= 0) line += " id " + std::to_string(t.input_id);
    line += "  s";
    for (double v : t.scores) line += " " + fixed(v, "%.2f");
    line += "  I";
    for (int e : t.selected) line += " e" + std::to_string(e);
    line += "  g";
    for (double w : t.weights) line += " " + fixed(w, "%.3f");
    lines.push_back(line);
  }
  return lines;
}

Lines rows_lines(const RankStage& s, bool backward, int max_values) {
  Lines lines{"rank " + std::to_string(s.rank) + "  [" + std::to_string(s.rows.size()) + ", " +
              std::to_string(s.width) + "]"};
  size_t label_width = 0, prob_width = 0;
  for (const TraceRow& r : s.rows) {
    label_width = std::max(label_width, display_width(r.label));
    prob_width = std::max(prob_width, display_width(probs(r, backward)));
  }
  auto pad = [](std::string t, size_t w) { return t + std::string(w - display_width(t), ' '); };
  size_t group = 0;
  std::int64_t left_in_group = 0;
  for (size_t i = 0; i < s.rows.size(); ++i) {
    while (left_in_group == 0 && group < s.groups.size()) {
      const ExpertGroup& g = s.groups[group++];
      lines.push_back("e" + std::to_string(g.expert) + ": " + std::to_string(g.rows) + (g.rows == 1 ? " row" : " rows"));
      left_in_group = g.rows;
    }
    const TraceRow& r = s.rows[i];
    std::string line = (s.groups.empty() ? "" : "  ") + pad(r.label, label_width);
    if (prob_width) line += "  " + pad(probs(r, backward), prob_width);
    line += "  " + values(r.values, max_values);
    lines.push_back(line);
    --left_in_group;
  }
  while (group < s.groups.size()) {  // experts that received no rows
    const ExpertGroup& g = s.groups[group++];
    lines.push_back("e" + std::to_string(g.expert) + ": 0 rows");
  }
  if (s.rows.empty()) lines.push_back("(no rows)");
  return lines;
}

Lines rank_lines(const Stage& stage, const RankStage& s, int max_values) {
  switch (stage.kind) {
    case StageKind::routing: return routing_lines(s);
    case StageKind::counts: return {"rank " + std::to_string(s.rank) + "  " + list(s.counts)};
    case StageKind::rows: return rows_lines(s, stage.phase.find("backward") != std::string::npos, max_values);
  }
  return {};
}

// Columns side by side, each padded to its widest line, separated by " │ ".
void print_columns(const std::vector<Lines>& columns, std::ostream& out) {
  std::vector<size_t> widths;
  size_t height = 0;
  for (const Lines& c : columns) {
    size_t w = 0;
    for (const auto& l : c) w = std::max(w, display_width(l));
    widths.push_back(w);
    height = std::max(height, c.size());
  }
  for (size_t i = 0; i < height; ++i) {
    std::string line = "  ";
    for (size_t c = 0; c < columns.size(); ++c) {
      const std::string cell = i < columns[c].size() ? columns[c][i] : "";
      line += cell;
      if (c + 1 < columns.size()) line += std::string(widths[c] - display_width(cell), ' ') + " │ ";
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << "\n";
  }
}

}  // namespace

void print_header(const Trace& t, std::ostream& out) {
  out << "moe-oracle step: " << t.example << ", " << t.dispatcher << " dispatcher\n"
      << "world " << t.world << " = ep " << t.ep << " · etp " << t.etp << " · edp " << t.world / (t.ep * t.etp) << "; "
      << t.num_experts << " experts, top-" << t.topk << ", h " << t.hidden << "; " << t.tokens_per_rank
      << " tokens per rank\n";
  for (size_t r = 0; r < t.rank_experts.size(); ++r) {
    out << (r ? " · " : "") << "rank " << r << " holds";
    for (int e : t.rank_experts[r]) out << " e" << e;
  }
  out << "\n";
  for (const auto& note : t.notes) out << note << "\n";
  out << "labels: a@r0→e2 = token a (it lives on rank 0), its copy for expert e2; a@r0→e0,e2 = token a sent once "
         "for e0 and e2; a@r0→e0+e2 = the sum of a's results from e0 and e2; · = a row that carries nothing\n";
}

void print_stage(const Trace& t, size_t index, size_t number, size_t count, const TextOptions& o, std::ostream& out) {
  const Stage& stage = t.stages.at(index);
  out << "\n━━ [" << number << "/" << count << "] " << stage.id << " — " << stage.title << "\n"
      << "   why: " << stage.why << "\n"
      << "   shape: " << stage.shape << (stage.transfer ? "   (rows crossed ranks to get here)" : "") << "\n";
  std::vector<Lines> columns;
  for (const RankStage& s : stage.ranks)
    if (!o.rank || *o.rank == s.rank) columns.push_back(rank_lines(stage, s, o.max_values));
  print_columns(columns, out);
}

void print_oracle(const Trace& t, std::ostream& out) {
  out << "\noracle: max |y_step − y_oracle| = " << fixed(t.oracle.max_abs_y, "%.1e")
      << ", max |dL/dx_step − dL/dx_oracle| = " << fixed(t.oracle.max_abs_grad_x, "%.1e") << " over "
      << t.world * t.tokens_per_rank << " tokens (moe_forward / moe_backward on the same batch; pass ≤ "
      << fixed(t.oracle.tolerance, "%.0e") << "): " << (t.oracle.pass() ? "PASS" : "FAIL") << "\n";
}

}  // namespace moe::step
