// `moe-oracle bench --experts-gemm`: the grouped SwiGLU of one rank's local experts on the CPU (forward and
// backward, distributed/kernels/grouped_swiglu.hpp), reported as docs/performance.md asks: the achieved GFLOP/s, the percentage
// of one dense Eigen GEMM of the same FLOPs timed in the same run (the practical peak), its share of a square GEMM
// (the machine's practical peak), and the percentage of a named limit, the CPU's double-precision peak, which the
// user gives: it cannot be derived here. On a virtual machine the pipe count and boost clock are hidden (an earlier
// portable SSE2 build reached twice the textbook SSE2 FLOP/cycle at the reported clock), so any formula would be a
// guess.
#pragma once

#include <ostream>

namespace moe::cli {

struct ExpertBenchOptions {
  int tokens = 1024;  // tokens on this rank
  int topk = 6;
  int experts = 8;    // local experts; the rows tokens·topk spread evenly over them (uniform routing)
  int hidden = 512;   // h, the experts' input and output width
  int ffn = 256;      // d, the expert FFN width (its ETP shard)
  int repetitions = 5;
  bool json = false;
  double peak_gflops = 0;  // the named limit; 0 = not given
};

void run_expert_bench(const ExpertBenchOptions& o, std::ostream& out);

}  // namespace moe::cli
