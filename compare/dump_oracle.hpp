// The oracle's side of comparing a dump: the global parameters reassembled from the ranks' shards, one oracle
// call per data-parallel replica, and what every rank's tensors should be.
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
};

struct OracleAnswer {
  std::vector<Expected> expected;  // in comparison order: forward, then backward
  // Replayed capacity: slots where the dump's decision differs from the oracle's own rule (-1: not replayed).
  int replay_differences = -1;
};

// Throws DumpError when the dump lacks what the oracle needs (inputs, parameters) or its replicated parameters
// differ between ranks.
// `progress`, when set, is called after each of the oracle_passes(dump) layer passes (a forward or a backward of
// one replica), so that a command can show how far a long comparison is.
OracleAnswer oracle_for(const Dump& dump, ExpertPath path = ExpertPath::expert_batched,
                        const std::function<void()>& progress = {});
int oracle_passes(const Dump& dump);

}  // namespace moe::compare
