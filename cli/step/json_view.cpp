#include "cli/step/json_view.hpp"

namespace moe::step {
namespace {

const char* kind_name(StageKind k) {
  switch (k) {
    case StageKind::routing: return "routing";
    case StageKind::counts: return "counts";
    case StageKind::rows: return "rows";
  }
  return "?";
}

nlohmann::json rank_json(const Stage& stage, const RankStage& s) {
  nlohmann::json j{{"rank", s.rank}};
  if (stage.kind == StageKind::counts) j["counts"] = s.counts;
  if (stage.kind == StageKind::routing) {
    j["routing"] = nlohmann::json::array();
    for (const RoutedToken& t : s.routing)
      j["routing"].push_back({{"label", t.label},
                              {"input_id", t.input_id},
                              {"scores", t.scores},
                              {"selected", t.selected},
                              {"weights", t.weights}});
  }
  if (stage.kind == StageKind::rows) {
    j["width"] = s.width;
    j["rows"] = nlohmann::json::array();
    for (const TraceRow& r : s.rows) {
      nlohmann::json assignments = nlohmann::json::array();
      for (const Assignment& a : r.assignments) assignments.push_back({a.token, a.expert});
      j["rows"].push_back({{"label", r.label},
                           {"source_rank", r.source_rank},
                           {"tokens", r.tokens},
                           {"experts", r.experts},
                           {"assignments", assignments},
                           {"values", r.values},
                           {"probs", r.probs},
                           {"prob_experts", r.prob_experts}});
    }
    j["groups"] = nlohmann::json::array();
    for (const ExpertGroup& g : s.groups) j["groups"].push_back({{"expert", g.expert}, {"rows", g.rows}});
  }
  return j;
}

}  // namespace

nlohmann::json trace_json(const Trace& t, const std::vector<size_t>& stages, std::optional<int> rank) {
  nlohmann::json j{{"example", t.example},
                   {"dispatcher", t.dispatcher},
                   {"layout", {{"world", t.world}, {"ep", t.ep}, {"etp", t.etp}}},
                   {"num_experts", t.num_experts},
                   {"topk", t.topk},
                   {"hidden", t.hidden},
                   {"tokens_per_rank", t.tokens_per_rank},
                   {"rank_experts", t.rank_experts},
                   {"notes", t.notes},
                   {"y", t.y}};
  j["stages"] = nlohmann::json::array();
  for (size_t i : stages) {
    const Stage& s = t.stages.at(i);
    nlohmann::json js{{"id", s.id},       {"phase", s.phase}, {"name", s.name},   {"kind", kind_name(s.kind)},
                      {"title", s.title}, {"why", s.why},     {"shape", s.shape}, {"transfer", s.transfer}};
    js["ranks"] = nlohmann::json::array();
    for (const RankStage& r : s.ranks)
      if (!rank || *rank == r.rank) js["ranks"].push_back(rank_json(s, r));
    j["stages"].push_back(js);
  }
  j["oracle"] = {{"max_abs_y", t.oracle.max_abs_y},
                 {"max_abs_grad_x", t.oracle.max_abs_grad_x},
                 {"tolerance", t.oracle.tolerance},
                 {"pass", t.oracle.pass()}};
  return j;
}

}  // namespace moe::step
