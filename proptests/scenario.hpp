// A scenario: one generated training step of the parallel system — model config, layout, dispatcher, scaling
// path, microbatching and the global batch (how many sequences, their padding, how their token ids are drawn) —
// and everything needed to rebuild it exactly from its one-line description.
//
// The batch and parameters are not stored: they come from seeds and from a small "id pool" (ids drawn from the
// first `id_pool` vocabulary entries, so a pool of 1–2 ids makes every token pick the same experts: hot experts
// and ranks that receive no token). `cold_experts` sets the expert bias of the last EP rank's experts to −10
// (sigmoid and sqrt-softplus scores are < 1 … ≈ √softplus), so that rank is never selected.
#pragma once

#include "distributed/check/differential_check.hpp"

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace moe::proptest {

struct Scenario {
  ModelConfig config;
  ParallelLayout layout;
  dist::StepOptions options;
  int seq = 0;
  int sequences = 0;        // B, the global batch
  std::vector<int> padded;  // per sequence: padded positions at its end; empty = none
  int id_pool = 0;          // ids drawn from [0, id_pool)
  bool distinct_ids = false;  // every token of the batch a different id (the vocabulary is made large enough)
  bool cold_experts = false;
  std::uint64_t param_seed = 0;
  std::uint64_t batch_seed = 0;

  int num_microbatches() const { return sequences / (options.micro_batch * layout.dp()); }
  std::int64_t valid_tokens() const;
};

// The parameters, the batch and the layout as a differential-check problem (double, docs/numerics.md tolerances).
dist::CheckProblem make_problem(const Scenario& s);

std::string describe(const ParallelLayout& l);
std::string describe(const Scenario& s);

// RapidCheck prints counterexamples through showValue.
void showValue(const Scenario& s, std::ostream& os);

}  // namespace moe::proptest
