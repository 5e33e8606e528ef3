// `moe-oracle bench --permute`: the two row movements every dispatcher is built from, timed against a plain copy
// of the same bytes in the same run (docs/performance.md):
//   permute    out[i] = x[rows[i]]             (kernels::gather_rows: the pack before a dispatch)
//   unpermute  out[rows[i]] += y[i], i rising  (kernels::scatter_add_rows: the combine after it)
// The copy is memcpy of the bytes the movement writes (R rows of h doubles), on one thread and split over all the
// OpenMP threads; the movements run once on one thread and once on all, each ratio against its own copy.
#pragma once

#include <ostream>

namespace moe::cli {

struct PermuteBenchOptions {
  int tokens = 4096;  // tokens on this rank
  int topk = 6;
  int experts = 32;   // routing is uniform random top-k over these
  int hidden = 512;   // h: row width in doubles
  int repetitions = 5;
  bool json = false;
};

void run_permute_bench(const PermuteBenchOptions& o, std::ostream& out);

}  // namespace moe::cli
