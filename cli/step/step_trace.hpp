// What `moe-oracle step` shows: every stage of one forward and backward pass through a dispatcher, on every rank.
//
// A stage is one buffer (or one list of counts) per rank. Each row of a buffer carries its provenance — which
// tokens it came from and, once a token has been copied per expert, which (token, expert) assignments it holds —
// written as a label: `a@r0→e2` is token a, living on rank 0, its copy for expert 2; `a@r0→e0+e2` is a row that
// holds the sum of a's results from experts 0 and 2 (the unpermute). The renderers (text, JSON, HTML) only read this.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace moe::step {

struct Assignment {
  int token = 0;   // global token index (a = 0)
  int expert = 0;  // global expert id
  bool operator==(const Assignment&) const = default;
};

struct TraceRow {
  std::string label;                  // "a@r0→e2", "a@r0→e0+e2", "·" for an all-zero row
  int source_rank = -1;               // the world rank its token lives on; -1 when it carries nothing
  std::vector<int> tokens;            // tokens it carries (one, except in a row that sums several)
  std::vector<int> experts;           // experts it is for (forward dispatch: from the moved probabilities)
  std::vector<Assignment> assignments;  // (token, expert) results it holds (after the experts)
  std::vector<double> values;         // the row of the data buffer
  std::vector<double> probs;          // the matching probabilities (or their gradients); empty when none moved
  std::vector<int> prob_experts;      // the expert of each entry of probs (-1: not selected)
};

// One routed token as the router sees it.
struct RoutedToken {
  std::string label;             // "a@r0"
  std::int64_t input_id = -1;    // hash layers: the id that picks its row of tid2eid
  std::vector<double> scores;    // [E] affinities s
  std::vector<int> selected;     // I_t, selection order
  std::vector<double> weights;   // g_{t,e} for the selected experts
};

struct ExpertGroup {
  int expert = 0;         // global id
  std::int64_t rows = 0;  // rows of this expert, back to back
};

enum class StageKind { routing, counts, rows };

struct RankStage {
  int rank = 0;
  std::vector<std::int64_t> counts;     // counts stages
  std::vector<TraceRow> rows;           // rows stages
  std::int64_t width = 0;               // rows stages: the buffer is [rows.size(), width]
  std::vector<ExpertGroup> groups;      // rows grouped by local expert (expert rows), else empty
  std::vector<RoutedToken> routing;     // the routing stage
};

struct Stage {
  std::string id;     // "dispatch.ep_alltoallv": phase.name, what --stage matches
  std::string phase;  // router, dispatch, experts, combine, combine_backward, experts_backward, dispatch_backward
  std::string name;
  StageKind kind = StageKind::rows;
  std::string title;  // one line: what the buffer is
  std::string why;    // one line: why the dispatcher builds it
  std::string shape;  // the shape in the seed's notation, e.g. "[Σ output_splits, h]"
  bool transfer = false;  // rows crossed ranks to get here (the renderers draw arrows)
  std::vector<RankStage> ranks;
};

struct OracleAgreement {
  double max_abs_y = 0;       // max |y_step − y_oracle| over every token
  double max_abs_grad_x = 0;  // max |dL/dx_step − dL/dx_oracle| (router path included)
  double tolerance = 0;       // what the comparison allowed
  bool pass() const { return max_abs_y <= tolerance && max_abs_grad_x <= tolerance; }
};

struct Trace {
  std::string example;               // "seed-000-ep2" or the preset
  std::string dispatcher;            // alltoall, allgather, flex
  std::vector<std::string> notes;    // how the example was built (routing table, sizes)
  int world = 0, ep = 0, etp = 0, num_experts = 0, topk = 0, hidden = 0, tokens_per_rank = 0;
  std::vector<std::vector<int>> rank_experts;  // [world] the experts each rank holds
  std::vector<Stage> stages;
  OracleAgreement oracle;
  std::vector<std::vector<double>> y;  // [T, h] the stepped output, token order
};

// "a", "b", …, "z", then "t26", "t27", …
std::string token_name(int token);

}  // namespace moe::step
