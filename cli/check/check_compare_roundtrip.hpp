// The main job's view of `compare`: the parallel system's own MoE layer, run on in-process ranks, is written out as
// a moe-dump/1 (each rank's inputs, parameter shards, outputs and gradients, as a foreign framework would write
// them) and judged by compare. Its parameters are sharded by the parallel system (shard_layer) and reassembled by
// compare (its own code), so a fault in either — a GLU half taken from the wrong block, an expert index off by an EP
// rank, a gradient summed over the wrong group — fails `check`. Without it, compare's reassembly ran only in its
// unit tests and tools/megatron-check. Five controls follow on one layout each: experts 0 and 1 made identical and
// every row that took one of them alone given the other (the run whose ties broke the other way: compare must replay
// those rows and pass), a row of the routing map moved far from any tie (must fail beyond rounding), a 1% scale on
// one expert's gradient in bf16 (must fail as a systematic error), and a two-replica global_aux run cut to one
// replica with the other's counts as its aux_pool (must pass; without the pool it must fail).
#pragma once

#include "reference/parallel_layout.hpp"

#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

namespace moe::cli {

struct RoundTrip {
  std::string preset;
  ParallelLayout layout;
  bool pass = false;
  int tensors = 0;          // compared by compare (forward and backward)
  std::string first_failure;  // "tensor rank index: dump …, oracle …" when it failed
  std::string shows;          // a step control's: what it shows ("a step's expert gradients ×2 named"); else empty
};

// Each (preset, layout) of the default set, dumped under `scratch` (a folder of this run's own, removed whole at
// the end).
std::vector<RoundTrip> compare_round_trips(const std::filesystem::path& scratch);

// One line for all when they pass, one per failure otherwise; nothing when there were none.
void print_round_trips(const std::vector<RoundTrip>& trips, std::ostream& out);

}  // namespace moe::cli
