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

// Rank r's tensors. Expert weights under the name the rank uses (SequentialMLP's, or TEGroupedMLP's when only that
// is present).
std::vector<TensorSpec> rank_tensors(const Dump& dump, int rank);

// The rules above; DumpError naming the first broken one.
void check_dump_tensors(const Dump& dump);

// Whether the dump holds a backward (output.grad on every rank; check_dump_tensors has refused "some").
bool has_backward(const Dump& dump);

}  // namespace moe::compare
