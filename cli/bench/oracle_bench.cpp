#include "cli/bench/oracle_bench.hpp"

#include "cli/bench/bench_timing.hpp"
#include "cli/build_isa.hpp"
#include "cli/model_options.hpp"
#include "cli/text_format.hpp"
#include "reference/moe_layer.hpp"
#include "reference/presets.hpp"
#include "reference/random_init.hpp"

#include <nlohmann/json.hpp>
#include <omp.h>
#include <sys/resource.h>

#include <cmath>
#include <iostream>
#include <stdexcept>

namespace moe::cli {
namespace {

double peak_resident_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return 1024.0 * double(usage.ru_maxrss);  // Linux reports KiB
}

}  // namespace

void run_oracle_bench(const OracleBenchOptions& o, std::ostream& out) {
  if (o.tokens < 1 || o.experts < o.topk || o.hidden < 1 || o.ffn < 1 || o.topk < 1)
    throw std::invalid_argument("--oracle: tokens, hidden, ffn >= 1 and 1 <= topk <= experts");
  MoeConfig config = layer_preset("v4-flash").config;
  config.hidden = o.hidden;
  config.num_experts = o.experts;
  config.topk = o.topk;
  config.ffn_hidden = o.ffn;
  config.shared_expert_ffn_hidden = o.ffn;
  const double tokens = o.tokens;
  require_fits(layer_memory(config, tokens), "this benchmark", "give fewer --experts or --tokens");
  const double flops = layer_flops(config, tokens);
  note_long_work(flops, o.path);

  const MoeParams<double> params = random_params<double>(config, 64, 7);
  const MoeInputs<double> inputs = random_inputs<double>(config, o.tokens, 1, 64, 11);
  const Matrix<double> grad_y = random_grad_y<double>(config, o.tokens, 13);

  const double start = now();
  const MoeForward<double> forward = moe_forward(config, params, inputs, o.path);
  const double forward_seconds = now() - start;
  const MoeGradients<double> grads = moe_backward(config, params, inputs, forward, grad_y, {}, o.path);
  const double seconds = now() - start;
  if (!std::isfinite(grads.x.sum())) throw std::runtime_error("--oracle: the layer's gradient is not finite");

  const double dense_gflops = square_gemm_gflops(), gflops = flops / seconds / 1e9;
  const double peak_bytes = peak_resident_bytes();

  if (o.json) {
    out << nlohmann::json{{"moe_oracle", MOE_ORACLE_VERSION}, {"isa", built_isa()}, {"tokens", o.tokens},
                          {"experts", o.experts}, {"hidden", o.hidden}, {"ffn", o.ffn}, {"topk", o.topk},
                          {"oracle_path", std::string(to_string(o.path))}, {"threads", omp_get_max_threads()}, {"forward_seconds", forward_seconds},
                          {"seconds", seconds}, {"gflops", gflops}, {"dense_gemm_gflops", dense_gflops},
                          {"peak_resident_bytes", peak_bytes}}
               .dump(2)
        << "\n";
    return;
  }
  out << "moe-oracle bench --oracle: one V4-Flash-shaped layer in double (h " << o.hidden << ", " << o.experts
      << " experts, top-" << o.topk << ", FFN " << o.ffn << ", a shared expert of " << o.ffn << "), " << o.tokens
      << " tokens, forward + backward on the " << to_string(o.path) << " path; " << omp_get_max_threads() << " OpenMP threads; built for " << built_isa()
      << "\n\n";
  TextTable t({"measurement", "time", "GFLOP", "GFLOP/s", "% of dense GEMM"});
  t.add_row({"oracle layer forward", trimmed(forward_seconds, 3) + " s", "", "", ""});
  t.add_row({"oracle layer forward + backward", trimmed(seconds, 3) + " s", trimmed(flops / 1e9, 4), trimmed(gflops, 3),
             trimmed(100 * gflops / dense_gflops, 2) + " %"});
  t.add_row({"dense Eigen GEMM 2048³ (median of 3)", "", "", trimmed(dense_gflops, 3), "100 %"});
  t.print(out);
  out << "\npeak resident memory: " << mib(peak_bytes) << "\n";
}

}  // namespace moe::cli
