// The oracle's side of comparing a dump: the parameters read from the ranks' shards, one oracle call per
// data-parallel replica around routed experts streamed one at a time, and what every rank's tensors should be.
//
//   replica d = the tp ranks j with dp rank d; its tokens x [S, B, h] = the ranks' SP slices (positions
//   [j·S/tp, (j+1)·S/tp)), rows s·B + b; capacity per tp rank (the partition); aux/z statistics over the replica
//   (Megatron's tp_cp group), global_aux over every replica (tp_dp_cp).
//
// What a rank holds in a bare layer run (no gradient synchronisation), and so what it is compared with:
//   output, hidden_states.grad, router.probs, router.routing_map   its own rows of its replica's call
//   router.local_tokens_per_expert                               its rows' expert-bias counts
//   experts.local_experts.{i}.linear_fc{1,2}.weight.grad          its ETP shard of expert ep_rank·nle + i, summed
//                                                                 over the tokens of its tp_ep group (the ranks that
//                                                                 dispatch to it), source rank by source rank
//   shared_experts.linear_fc{1,2}.weight.grad                     its TP shard over its replica's tokens
//   aux_loss, z_loss, shared_experts.gate_weight.grad             summed over the replica's tp ranks (each rank
//                                                                 holds its share)
//   router.weight.grad                                            summed over every rank
// fc1 shards are [gate_j; up_j] (the GLU halves each split over the ETP/TP ranks), fc2 shards column blocks.
#pragma once

#include "compare/dump.hpp"
#include "reference/moe_layer.hpp"

#include <functional>
#include <string>
#include <vector>

namespace moe::compare {

struct Expected {
  std::string tensor;              // the dump's name
  int rank = 0;                    // where it is reported
  std::vector<int> summed_ranks;   // the dump's values summed over these ranks first (empty: `rank` alone)
  std::vector<std::int64_t> shape;
  std::vector<double> values;
  bool exact = false;              // booleans and counts: compared bit for bit
  bool backward = false;           // needs output.grad
  std::int64_t rows = 0;           // the token rows it is made of (an expert's: those routed to it), which bound
                                   // how well a scale can be fitted to it (error_model.hpp: fit_scale)
};

// The oracle's answer is streamed: each expected tensor is handed over as soon as it is known and then dropped, so
// that a layer of any number of experts holds one expert's weights and gradients at a time. `rounded` is the same
// tensor from the rounding oracle (error_model.hpp), or null when it is not run.
using ExpectedSink = std::function<void(const Expected& exact, const Expected* rounded)>;

struct OracleOptions {
  ExpertPath path = ExpertPath::expert_batched;
  bool rounding_too = false;         // run the rounding oracle beside the double one (the error model of float32
                                     // and bf16 dumps)
  std::function<void()> progress;    // called after each of oracle_steps(dump) steps
};

// A routing difference beyond the router's rounding: the rank and its local row, the worst pair's margin and the
// bound rounding allows there (routing_replay.hpp).
struct FlipBeyondRounding {
  int rank = 0;
  std::int64_t row = 0;
  double margin = 0, bound = 0;
};

// What routing replay did (routing_replay.hpp): rows whose selection was replayed from the dump's routing map, and
// rows that differ beyond the rounding (they keep the oracle's selection and fail the map).
struct SelectionReplay {
  bool possible = false;       // a score-routed layer without capacity whose ranks hold router.routing_map
  std::int64_t rows = 0;       // rows looked at
  std::int64_t replayed = 0;   // rows whose selection differed within the rounding: replayed
  double largest_margin = 0;   // the largest margin replayed, and the bound at that row
  double its_bound = 0;
  std::vector<FlipBeyondRounding> beyond_rounding;
};

struct OracleRun {
  // Replayed capacity: slots where the dump's decision differs from the oracle's own rule (-1: not replayed).
  int replay_differences = -1;
  SelectionReplay replay;
};

// Hands `sink` every tensor the dump's ranks should hold, expert gradients first (expert by expert), then the
// forward's tensors, then the other gradients. Each expert's weights are read from the ranks that hold them when
// it is computed, for the rows of every replica at once, and the forward and backward of those rows are done in
// that one visit (the backward needs output.grad, not the forward's output).
// Throws DumpError when the dump lacks what the oracle needs (inputs, parameters) or its parameters differ between
// the ranks that hold them.
OracleRun run_oracle(const Dump& dump, const OracleOptions& options, const ExpectedSink& sink);

// Progress steps of run_oracle: one per expert, one for the layer around them.
int oracle_steps(const Dump& dump);

// The oracle's peak memory for this dump, estimated from dump.json's sizes before anything is allocated: the
// parameters without the routed experts, each replica's activations and routing, one expert's weights, its
// gradient per tp_ep group and its rows; twice the per-replica part with the rounding oracle.
std::uint64_t oracle_memory_bytes(const Dump& dump, bool rounding_too);

}  // namespace moe::compare
