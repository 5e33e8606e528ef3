// Comparing a dump with the oracle (dump_oracle.hpp): per tensor, the largest error over the ranks that hold it,
// the first failing element named by tensor, rank and index; what the oracle could compare but the dump lacks;
// and, when it fails, which single Megatron deviation would explain the difference.
#pragma once

#include "compare/dump.hpp"
#include "compare/dump_oracle.hpp"
#include "compare/error_model.hpp"
#include "reference/moe_layer.hpp"

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace moe::compare {

struct Mismatch {
  int rank = 0;
  std::int64_t index = 0;  // flat, C order
  double got = 0, want = 0;
};

struct TensorResult {
  std::string tensor;
  std::vector<int> ranks;   // where it was compared (or, for sums, the ranks summed)
  bool summed = false;      // the dump's values summed over `ranks` before comparing
  std::int64_t elements = 0;
  double max_abs = 0;       // max |dump − oracle|
  double max_ratio = 0;     // max |dump − oracle| / (atol + rtol·|oracle|); exact tensors: 0 or ∞
  bool exact = false;
  bool backward = false;    // a gradient (needs output.grad)
  std::optional<Mismatch> first;  // the first failing element (in rank, then index order)
  // router.routing_map: the rows that differ after routing replay (each a difference beyond the router's rounding).
  std::int64_t rows_differing = 0;
  // got − want ≈ β·want on the rank where it is most standard errors away (error_model.hpp); systematic: it fails.
  ScaleFit fit;
  int fit_rank = -1;
  bool systematic = false;

  bool pass() const { return !first.has_value() && !systematic; }
};

struct Comparison {
  std::vector<TensorResult> tensors;  // in comparison order: forward, then backward
  std::vector<std::string> absent;    // compared if present: "name (ranks …)"
  std::vector<std::string> ignored;   // dump tensors nothing is compared with (inputs and parameters excluded)
  int replay_differences = -1;        // replayed capacity slots that differ from the oracle's rule (-1: none replayed)
  SelectionReplay replay;             // routing replay at near ties (dump_oracle.hpp)
  bool error_model = false;           // elements judged by the rounding oracle's error model (float32, bf16)
  bool backward = false;              // the dump holds output.grad: gradients were compared

  // How many tensors of each side were compared (the verdict states both; `output` is always among the forward's).
  int forward_tensors() const;
  int backward_tensors() const;

  bool pass() const;
  const TensorResult* first_failure() const;
};

// The oracle on `path` (expert-batched, the fast path, unless the definition is asked for), streamed: each expert's
// weights are read from the dump when it is computed and its gradients compared at once, so that memory holds one
// expert at a time. `progress` is called after each of compare_steps(dump) steps (one per expert, one for the rest).
int compare_steps(const Dump& dump);

Comparison compare_dump(const Dump& dump, ExpertPath path = ExpertPath::expert_batched,
                        const std::function<void()>& progress = {});

// For a failing dump: the single deviations (semantics spec changes like "+fused-swiglu-ignores-clamp") under which
// the comparison passes — the names of what the dump's framework computes differently.
std::vector<std::string> explaining_deviations(const Dump& dump, ExpertPath path = ExpertPath::expert_batched);

}  // namespace moe::compare
