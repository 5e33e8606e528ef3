// What each rank of a dump may hold (compare/README.md's table) and the rules of presence a dump must keep before
// anything is computed from it:
//   - what the oracle needs (hidden_states, every parameter of the config) and `output` are on every rank;
//   - everything else is on every rank or on none: a tensor on some ranks only is an inconsistent dump, not a
//     partial comparison (a missing output.grad on one rank once made the whole backward vanish unnoticed);
//   - no gradient without output.grad (the loss it differentiates), and with output.grad, hidden_states.grad;
//   - no parameter the config does not have (router.expert_bias without expert_bias: the config is wrong);
//   - every shape and dtype as the table says, read from the files' headers — so that every size the oracle
//     allocates from dump.json is backed by a file of that size.
#pragma once

#include "compare/dump.hpp"

#include <string>
#include <vector>

namespace moe::compare {

enum class TensorRole { input, parameter, forward, backward };

struct TensorSpec {
  std::string name;
  std::vector<std::int64_t> shape;
  TensorRole role = TensorRole::forward;
  bool required = false;  // on every rank (else: on every rank or none)
  bool exact = false;     // booleans and counts: stored as |b1 or integers, compared bit for bit
};

// How a rank names its routed experts' weights and gradients: SequentialMLP's experts.local_experts.{i}.linear_fc1.weight
// or TEGroupedMLP's experts.linear_fc1.weight{i}. One form for the whole dump (check_dump_tensors): presence is
// judged per expert, so an expert named one way on one rank and the other way elsewhere would escape the rule
// "on every rank or on none" and its gradient would go uncompared.
enum class ExpertNaming { sequential, grouped };
ExpertNaming expert_naming(const RankDump& rank);  // grouped when any of its files has the grouped form
// Local expert i's weight (`which` = "linear_fc1" or "linear_fc2"); its gradient is this + ".grad".
std::string expert_weight_name(ExpertNaming naming, std::int64_t local, const std::string& which);

// The shapes of a GLU's shards as a rank holds them (its gradients the same): fc1 [2·d/parts, h] = [gate_j; up_j]
// and fc2 [h, d/parts]. A routed expert is cut over ETP (d = ffn_hidden), the shared expert over TP.
struct GluShardShapes {
  std::vector<std::int64_t> fc1, fc2;
};
GluShardShapes expert_shard_shapes(const MoeConfig& c, const ParallelLayout& l);
GluShardShapes shared_shard_shapes(const MoeConfig& c, const ParallelLayout& l);

// Rank r's tensors, expert weights and gradients under the rank's naming.
std::vector<TensorSpec> rank_tensors(const Dump& dump, int rank);

// The rules above; DumpError naming the first broken one.
void check_dump_tensors(const Dump& dump);

// Whether the dump holds a backward (output.grad on every rank; check_dump_tensors has refused "some").
bool has_backward(const Dump& dump);

}  // namespace moe::compare
