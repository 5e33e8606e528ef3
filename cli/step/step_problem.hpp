// The batch `moe-oracle step` walks: a layer, its parameters, a layout and every rank's tokens.
//
// The built-in example is seed 000's 4-token EP2 case: 4 experts, rank 0 holds e0/e1 and rank 1 holds e2/e3,
// tokens a, b on rank 0 and c, d on rank 1, each token picks 2. Its routing is forced through a tid2eid hash
// table (a DeepSeek-V4 hash layer: I_t = tid2eid[input_id_t]) chosen to give exactly the seed's numbers:
//   a→{e0,e2}  b→{e1,e3}  c→{e1,e3}  d→{e2,e3}
//   rank 0 sends [2,2], rank 1 sends [1,3]; output_splits [2,1] and [2,3]; ranks receive 3 and 5 rows.
// A preset example runs a tiny-* layer (routed branch only) on random tokens instead.
#pragma once

#include "distributed/dispatch/dispatcher.hpp"
#include "reference/presets.hpp"

#include "reference/moe_layer.hpp"
#include "reference/parallel_layout.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace moe::step {

struct StepProblem {
  std::string name;
  std::vector<std::string> notes;  // printed with the trace: how the example was built
  MoeConfig config;                // routed branch only: no shared expert, no latent, no aux losses
  MoeParams<double> params;
  ParallelLayout layout;           // tp = cp = 1: dp = world, every rank holds its own tokens
  int tokens_per_rank = 0;
  Matrix<double> x;                // [T, h], T = world · tokens_per_rank; rank r holds rows [r·n, (r+1)·n)
  IndexVector input_ids;           // [T] (hash layers)
  Matrix<double> grad_y;           // [T, h] the upstream gradient of the backward

  int tokens() const { return layout.world * tokens_per_rank; }
};

// Its notes give the splits that seed's example expects under `kind`, each dispatcher's own.
StepProblem seed_example(std::uint64_t seed, dist::DispatcherKind kind);

// Throws std::invalid_argument naming the rule when the layout or sizes do not fit.
StepProblem preset_example(const LayerPreset& preset, int world, int ep, int etp, int tokens_per_rank,
                           std::uint64_t seed);

}  // namespace moe::step
