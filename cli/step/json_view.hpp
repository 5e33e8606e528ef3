// The machine view of a Trace (`moe-oracle step --json`, and the data the HTML page draws from).
//   {example, dispatcher, layout {world, ep, etp}, num_experts, topk, hidden, tokens_per_rank, rank_experts,
//    notes, stages: [{id, phase, name, kind, title, why, shape, transfer,
//                     ranks: [{rank, counts | routing | rows [{label, source_rank, tokens, experts,
//                              assignments [[t, e]], values, probs, prob_experts}], width, groups}]}],
//    oracle {max_abs_y, max_abs_grad_x, tolerance, pass}, y}
#pragma once

#include "cli/step/step_trace.hpp"

#include <nlohmann/json.hpp>

#include <optional>
#include <vector>

namespace moe::step {

// The stages listed in `stages` (indices into trace.stages), every rank or only `rank`.
nlohmann::json trace_json(const Trace& trace, const std::vector<size_t>& stages, std::optional<int> rank);

}  // namespace moe::step
