// `moe-oracle bench --oracle`: how fast the oracle itself is on a realistic shape — one DeepSeek-V4-Flash-shaped
// layer (h 4096, top-6, expert FFN 2048, one shared expert, sqrt-softplus with expert bias, clamp, seq-aux) forward
// and backward in double — against a dense Eigen GEMM timed in the same run (the practical peak of these cores),
// with the peak resident memory. By default the experts take the expert-batched path (one GEMM per expert);
// --oracle-path per-token times the definition (matrix-vector products that read like the formulas).
//
// V4-Flash has 256 experts; their double weights and gradients alone would take 96 GiB held at once, so the default
// holds 16 experts and 2048 tokens (about a minute on two cores). The FLOPs depend on tokens · top-k, not on the
// expert count, and each expert still sees hundreds of tokens. The whole layer, 256 experts streamed one at a time,
// is what `compare` of tools/make-v4-flash-dump's dump times (docs/performance.md).
#pragma once

#include "reference/moe_layer.hpp"

#include <ostream>

namespace moe::cli {

struct OracleBenchOptions {
  int tokens = 2048;
  int experts = 16;
  int hidden = 4096;
  int ffn = 2048;
  int topk = 6;
  ExpertPath path = ExpertPath::expert_batched;  // --oracle-path: the fast path unless the definition is asked for
  bool json = false;
};

void run_oracle_bench(const OracleBenchOptions& o, std::ostream& out);

}  // namespace moe::cli
