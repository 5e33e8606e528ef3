#include "cli/bench/expert_bench.hpp"

#include "cli/bench/bench_timing.hpp"
#include "cli/build_isa.hpp"
#include "cli/text_format.hpp"
#include "distributed/kernels/grouped_swiglu.hpp"
#include "reference/random_init.hpp"

#include <nlohmann/json.hpp>
#include <omp.h>

#include <stdexcept>
#include <string>

namespace moe::cli {
namespace {

struct Phase {
  std::string name;
  double seconds = 0, flops = 0;
};

}  // namespace

void run_expert_bench(const ExpertBenchOptions& o, std::ostream& out) {
  if (o.tokens < 1 || o.topk < 1 || o.experts < 1 || o.hidden < 1 || o.ffn < 1 || o.repetitions < 1)
    throw std::invalid_argument("--experts-gemm: tokens, topk, experts, hidden, ffn and repetitions must be >= 1");
  const std::int64_t rows = std::int64_t(o.tokens) * o.topk, h = o.hidden, d = o.ffn;
  std::vector<std::int64_t> groups(static_cast<size_t>(o.experts), rows / o.experts);
  for (std::int64_t r = 0; r < rows % o.experts; ++r) ++groups[static_cast<size_t>(r)];

  SeededUniform rng(23);
  const Matrix<double> x = rng.matrix<double>(rows, h, 1.0), dy = rng.matrix<double>(rows, h, 1.0);
  const Vector<double> probs = rng.matrix<double>(rows, 1, 1.0);
  kernels::ExpertShards<double> w, grads;
  for (int e = 0; e < o.experts; ++e) {
    w.fc1.push_back(rng.matrix<double>(2 * d, h, 0.05));
    w.fc2.push_back(rng.matrix<double>(h, d, 0.05));
    grads.fc1.push_back(Matrix<double>::Zero(2 * d, h));
    grads.fc2.push_back(Matrix<double>::Zero(h, d));
  }
  const kernels::SwigluOptions options;

  // Forward: x·fc1ᵀ (2·R·h·2d) and act·fc2ᵀ (2·R·d·h); the backward twice that (dx and the weight gradients).
  const double forward_flops = 6.0 * double(rows) * double(h) * double(d);
  // The practical peak: one dense GEMM with the forward's FLOPs, [R, h]·[h, 3d].
  const Matrix<double> b = rng.matrix<double>(h, 3 * d, 0.05);
  Matrix<double> c(rows, 3 * d);
  std::vector<Phase> phases;
  phases.push_back({"dense Eigen GEMM [R,h]·[h,3d]", timed(o.repetitions, [&] { c.noalias() = x * b; }).median,
                    forward_flops});
  kernels::GroupedSwigluForward<double> f;
  phases.push_back({"grouped SwiGLU forward",
                    timed(o.repetitions, [&] { f = kernels::grouped_swiglu_forward(x, groups, w, probs, options); }).median,
                    forward_flops});
  phases.push_back({"grouped SwiGLU backward", timed(o.repetitions, [&] {
                      kernels::grouped_swiglu_backward(x, groups, w, probs, options, f.pre, dy, grads);
                    }).median,
                    2 * forward_flops});

  const int cores = omp_get_max_threads();
  const double peak = o.peak_gflops;  // 0: not given
  const double dense_gflops = phases[0].flops / phases[0].seconds / 1e9;
  const double square_gflops = square_gemm_gflops();  // the machine's practical peak, same run
  if (o.json) {
    nlohmann::json j{{"moe_oracle", MOE_ORACLE_VERSION}, {"isa", built_isa()}, {"rows", rows}, {"hidden", h},
                     {"ffn", d}, {"experts", o.experts}, {"threads", cores}};
    if (peak > 0) j["named_peak_gflops"] = peak;
    j["square_gemm_gflops"] = square_gflops;
    for (const auto& p : phases)
      j["phases"].push_back({{"name", p.name}, {"seconds", p.seconds}, {"gflops", p.flops / p.seconds / 1e9}});
    out << j.dump(2) << "\n";
    return;
  }
  out << "moe-oracle bench --experts-gemm: " << o.experts << " local experts, R = " << rows << " rows ("
      << o.tokens << " tokens × top-" << o.topk << ", uniform), h " << h << ", d " << d << ", double, " << cores
      << " OpenMP threads; median of " << o.repetitions << "; built for " << built_isa() << "\n"
      << "named limit: "
      << (peak > 0 ? trimmed(peak, 1) + " GFLOP/s (--peak-gflops)"
                   : "none given (--peak-gflops: the CPU's double-precision peak for these threads, from its spec)")
      << "\n\n";
  TextTable t({"phase", "time", "GFLOP/s", "% of dense GEMM", "% of square GEMM", "% of named limit"});
  for (const auto& p : phases) {
    const double gflops = p.flops / p.seconds / 1e9;
    t.add_row({p.name, trimmed(p.seconds * 1e3, 3) + " ms", trimmed(gflops, 2),
               trimmed(100 * gflops / dense_gflops, 1) + " %", trimmed(100 * gflops / square_gflops, 1) + " %",
               peak > 0 ? trimmed(100 * gflops / peak, 1) + " %" : "-"});
  }
  t.add_row({"dense Eigen GEMM 2048³ (the machine's practical peak)", "", trimmed(square_gflops, 2), "", "100 %",
             peak > 0 ? trimmed(100 * square_gflops / peak, 1) + " %" : "-"});
  t.print(out);
}

}  // namespace moe::cli
