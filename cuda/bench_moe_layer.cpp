// Benchmark of the CUDA backend on one GPU (run by tools/gpu-check), reporting as docs/performance.md asks: each figure
// with its percentage of a named limit (H200: 4.8 TB/s HBM3e, 989 TFLOP/s dense bf16) and of a practical peak
// measured in the same run (a device-to-device cudaMemcpy of the same bytes; one dense cuBLAS GEMM of the same
// FLOPs). The layer figures time cuda/expert_layer.hpp, the code the layer test holds to the oracle.
// Shape: a DeepSeek-V4-Flash-like layer, hidden 4096, 256 experts, top-6, ffn 2048, 8192 tokens, bf16.
//   usage: cuda_bench [results-file]   (lines also go to stdout)
#include "cuda/cuda_error.hpp"
#include "cuda/cutlass_grouped_gemm.hpp"
#include "cuda/device_buffer.hpp"
#include "cuda/device_probe.hpp"
#include "cuda/expert_layer.hpp"
#include "cuda/grouped_gemm.hpp"
#include "cuda/token_kernels.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace {

using namespace moe::cuda;

constexpr double hbm_bytes_per_s = 4.8e12, bf16_flops_per_s = 989e12;
constexpr std::int64_t tokens = 8192, hidden = 4096, experts = 256, topk = 6, ffn = 2048, rows = tokens * topk;

// Mean seconds per call over `iterations`, after two warm-up calls, timed with events on the context's stream.
double seconds_per_call(const DeviceContext& ctx, const std::function<void()>& fn, int iterations) {
  fn();
  fn();
  cudaEvent_t start = nullptr, stop = nullptr;
  MOE_CUDA_CHECK(cudaEventCreate(&start));
  MOE_CUDA_CHECK(cudaEventCreate(&stop));
  MOE_CUDA_CHECK(cudaEventRecord(start, ctx.stream()));
  for (int i = 0; i < iterations; ++i) fn();
  MOE_CUDA_CHECK(cudaEventRecord(stop, ctx.stream()));
  MOE_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  MOE_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms / 1e3 / iterations;
}

std::string percent(double part, double whole) {
  std::ostringstream s;
  s.precision(1);
  s << std::fixed << 100.0 * part / whole << "%";
  return s.str();
}

template <typename T>
DeviceBuffer<T> random_device(std::size_t n, unsigned seed, double scale) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-float(scale), float(scale));
  std::vector<float> host(n);
  for (auto& v : host) v = u(gen);
  if constexpr (std::is_same_v<T, float>) {
    return DeviceBuffer<float>::from_host(host);
  } else {
    std::vector<bf16> narrow(n);
    std::transform(host.begin(), host.end(), narrow.begin(), to_bf16);
    return DeviceBuffer<bf16>::from_host(narrow);
  }
}

int run(std::ostream& out) {
  DeviceContext ctx;
  const cudaStream_t s = ctx.stream();
  cudaDeviceProp prop{};
  MOE_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  out << "device: " << prop.name << "; shape: tokens " << tokens << ", hidden " << hidden << ", experts " << experts
      << ", top-" << topk << ", ffn " << ffn << ", bf16 data, fp32 router\n";

  auto x = random_device<bf16>(std::size_t(tokens * hidden), 1, 1.0);
  auto router_weight = random_device<float>(std::size_t(experts * hidden), 2, 0.05);
  // Expert weights: a constant byte pattern (bf16 0x3c3c ≈ 0.0115); their values do not change the speed.
  DeviceBuffer<bf16> fc1(static_cast<std::size_t>(experts * 2 * ffn * hidden)),
      fc2(static_cast<std::size_t>(experts * hidden * ffn));
  MOE_CUDA_CHECK(cudaMemset(fc1.data(), 0x3c, fc1.size() * sizeof(bf16)));
  MOE_CUDA_CHECK(cudaMemset(fc2.data(), 0x3c, fc2.size() * sizeof(bf16)));

  // Routing once, to get a realistic permutation for the token kernels.
  DeviceBuffer<float> x_router(static_cast<std::size_t>(tokens * hidden)),
      logits(static_cast<std::size_t>(tokens * experts)), scores(static_cast<std::size_t>(tokens * experts)),
      probs(static_cast<std::size_t>(rows)), permuted_probs(static_cast<std::size_t>(rows));
  DeviceBuffer<std::int32_t> ids(static_cast<std::size_t>(rows)), row_slot(static_cast<std::size_t>(rows)),
      slot_row(static_cast<std::size_t>(rows));
  DeviceBuffer<std::int64_t> per_expert(static_cast<std::size_t>(experts));
  RouterSpec spec;
  spec.score = RouterSpec::Score::sigmoid;
  spec.renormalise = true;
  spec.renormalise_epsilon = 1e-20;
  spec.experts = int(experts);
  spec.topk = int(topk);
  convert<bf16, float>(s, x.data(), x_router.data(), tokens * hidden);
  gemm<float>(ctx, Op::n, Op::t, tokens, experts, hidden, x_router.data(), hidden, router_weight.data(), hidden,
              logits.data(), experts, 0);
  const double route_s = seconds_per_call(
      ctx,
      [&] {
        route_topk<float>(s, spec, tokens, logits.data(), nullptr, nullptr, nullptr, scores.data(), ids.data(),
                          probs.data());
        build_permutation(s, tokens, int(topk), int(experts), ids.data(), row_slot.data(), slot_row.data(),
                          per_expert.data());
      },
      10);
  ctx.synchronize();
  const auto counts = per_expert.to_host();
  out << "routing (scores + top-k + permutation, no GEMM): " << route_s * 1e3 << " ms; tokens per expert min "
      << *std::min_element(counts.begin(), counts.end()) << ", max " << *std::max_element(counts.begin(), counts.end())
      << ", mean " << rows / experts << "\n";

  // Permute / unpermute against a device-to-device copy of the same bytes.
  DeviceBuffer<bf16> permuted(static_cast<std::size_t>(rows * hidden)),
      combined(static_cast<std::size_t>(tokens * hidden));
  const double row_bytes = double(hidden) * sizeof(bf16);
  const double copy_s = seconds_per_call(
      ctx,
      [&] {
        MOE_CUDA_CHECK(cudaMemcpyAsync(permuted.data(), fc1.data(), std::size_t(rows * hidden) * sizeof(bf16),
                                       cudaMemcpyDeviceToDevice, s));
      },
      20);
  const double copy_bw = 2.0 * double(rows) * row_bytes / copy_s;  // read + write
  out << "cudaMemcpy D2D of " << double(rows) * row_bytes / 1e6 << " MB: " << copy_bw / 1e12 << " TB/s ("
      << percent(copy_bw, hbm_bytes_per_s) << " of 4.8 TB/s HBM3e)\n";
  const double permute_s = seconds_per_call(
      ctx,
      [&] {
        permute<bf16>(s, x.data(), hidden, tokens, int(topk), row_slot.data(), probs.data(), permuted.data(),
                      permuted_probs.data());
      },
      20);
  const double permute_bw = 2.0 * double(rows) * row_bytes / permute_s;
  out << "permute bf16: " << permute_s * 1e6 << " us, " << permute_bw / 1e12 << " TB/s ("
      << percent(permute_bw, hbm_bytes_per_s) << " of HBM, " << percent(permute_bw, copy_bw) << " of memcpy)\n";
  const double unpermute_s = seconds_per_call(
      ctx,
      [&] {
        unpermute<bf16>(s, permuted.data(), hidden, tokens, int(topk), slot_row.data(), probs.data(), combined.data());
      },
      20);
  const double unpermute_bw = (double(rows) + double(tokens)) * row_bytes / unpermute_s;
  out << "unpermute bf16 (weighted, fixed order): " << unpermute_s * 1e6 << " us, " << unpermute_bw / 1e12 << " TB/s ("
      << percent(unpermute_bw, hbm_bytes_per_s) << " of HBM, " << percent(unpermute_bw, copy_bw) << " of memcpy)\n";

  // Grouped SwiGLU against one dense GEMM of the same FLOPs: [rows, hidden] · [hidden, 3·ffn].
  const double flops = 6.0 * double(rows) * double(hidden) * double(ffn);
  DeviceBuffer<bf16> dense_out(static_cast<std::size_t>(rows * 3 * ffn));
  const double dense_s = seconds_per_call(
      ctx,
      [&] {
        gemm<bf16>(ctx, Op::n, Op::t, rows, 3 * ffn, hidden, permuted.data(), hidden, fc1.data(), hidden,
                   dense_out.data(), 3 * ffn, 0);
      },
      5);
  const double dense_rate = flops / dense_s;
  out << "dense cuBLAS bf16 GEMM " << rows << "x" << 3 * ffn << "x" << hidden << ": " << dense_rate / 1e12
      << " TFLOP/s (" << percent(dense_rate, bf16_flops_per_s) << " of 989)\n";
  std::vector<std::int64_t> groups(counts.begin(), counts.end());
  const DeviceExperts<bf16> ex{fc1.data(), fc2.data(), hidden, ffn};
  moe::kernels::SwigluOptions options;
  options.clamp = 7.0;
  DeviceBuffer<bf16> pre(static_cast<std::size_t>(rows * 2 * ffn)), expert_out(static_cast<std::size_t>(rows * hidden));
  // Each way of running the grouped GEMMs (device_context.hpp): cuBLAS's grouped call, lanes at 4, 8 and 16 side
  // streams, one stream, CUTLASS's one launch where built; the layer below uses the fastest forward.
  struct Way {
    GroupedGemm grouped;
    int lanes;
    std::string name;
  };
  std::vector<Way> ways{{GroupedGemm::one_launch, 1, "one cuBLAS grouped call"},
                        {GroupedGemm::lanes, 4, "per-expert cuBLAS on 4 streams"},
                        {GroupedGemm::lanes, 8, "per-expert cuBLAS on 8 streams"},
                        {GroupedGemm::lanes, 16, "per-expert cuBLAS on 16 streams"},
                        {GroupedGemm::per_group, 1, "per-expert cuBLAS, one stream"}};
  // Last: it has not run on a GPU before, and a device fault would end the ways after it.
  if (cutlass_grouped_available()) ways.push_back({GroupedGemm::cutlass, 1, "one CUTLASS grouped launch"});
  else out << "grouped SwiGLU (one CUTLASS grouped launch): not built (no CUTLASS headers; tools/fetch-cutlass)\n";
  double best_fwd_s = 0;
  const Way* best = &ways.front();
  DeviceBuffer<bf16> g1(fc1.size()), g2(fc2.size()), dx(static_cast<std::size_t>(rows * hidden));
  DeviceBuffer<float> dprob(static_cast<std::size_t>(rows));
  g1.zero(s);
  g2.zero(s);
  for (const auto& way : ways) {
    const DeviceContext run_ctx(GemmMode::cublas, way.grouped, way.lanes);
    const cudaStream_t rs = run_ctx.stream();
    MOE_CUDA_CHECK(cudaStreamSynchronize(s));  // the inputs were written on ctx's stream
    const double fwd_s = seconds_per_call(
        run_ctx,
        [&] {
          grouped_swiglu_forward<bf16>(run_ctx, permuted.data(), groups, ex, permuted_probs.data(), options, pre.data(),
                                       expert_out.data());
        },
        5);
    out << "grouped SwiGLU forward bf16 (" << way.name << "): " << fwd_s * 1e3 << " ms, " << flops / fwd_s / 1e12
        << " TFLOP/s (" << percent(flops / fwd_s, bf16_flops_per_s) << " of 989, " << percent(flops / fwd_s, dense_rate)
        << " of dense cuBLAS)\n";
    const double bwd_s = seconds_per_call(
        run_ctx,
        [&] {
          grouped_swiglu_backward<bf16>(run_ctx, permuted.data(), groups, ex, permuted_probs.data(), options,
                                        pre.data(), expert_out.data(), dx.data(), dprob.data(), g1.data(), g2.data());
        },
        3);
    out << "grouped SwiGLU backward bf16 (" << way.name << "): " << bwd_s * 1e3 << " ms, " << 2 * flops / bwd_s / 1e12
        << " TFLOP/s (" << percent(2 * flops / bwd_s, bf16_flops_per_s) << " of 989, "
        << percent(2 * flops / bwd_s, dense_rate) << " of dense cuBLAS)\n";
    MOE_CUDA_CHECK(cudaStreamSynchronize(rs));
    if (run_ctx.grouped_fallbacks() > 0)  // then the figures above are the lanes', not CUTLASS's
      out << "  (" << way.name << ": " << run_ctx.grouped_fallbacks() << " grouped GEMMs fell back to lanes)\n";
    if (best_fwd_s == 0 || fwd_s < best_fwd_s) {
      best_fwd_s = fwd_s;
      best = &way;
    }
  }
  const DeviceContext layer_ctx(GemmMode::cublas, best->grouped, best->lanes);

  DeviceExpertLayer<bf16> layer;
  layer.spec = spec;
  layer.options = options;
  layer.router_weight = router_weight.data();
  layer.experts = ex;
  DeviceBuffer<bf16> y(static_cast<std::size_t>(tokens * hidden));
  const double layer_s = seconds_per_call(
      layer_ctx, [&] { expert_layer_forward<bf16>(layer_ctx, layer, x.data(), tokens, y.data()); }, 5);
  out << "layer forward (route, permute, grouped SwiGLU, unpermute; " << best->name << "), 1 GPU: " << layer_s * 1e3
      << " ms, " << flops / layer_s / 1e12 << " TFLOP/s of expert math (" << percent(flops / layer_s, bf16_flops_per_s)
      << " of 989, " << percent(flops / layer_s, dense_rate) << " of dense cuBLAS)\n";
  // Forward and backward, the code of the layer test (cuda/tests/expert_layer_test.cpp): the expert math is three
  // times the forward's (the router's GEMMs, under 1% of it, are not counted).
  const auto dy = random_device<bf16>(std::size_t(tokens * hidden), 5, 1.0);
  DeviceBuffer<bf16> layer_dx(static_cast<std::size_t>(tokens * hidden));
  DeviceBuffer<float> grad_router(router_weight.size());
  grad_router.zero(layer_ctx.stream());
  const double step_s = seconds_per_call(
      layer_ctx,
      [&] {
        const auto saved = expert_layer_forward<bf16>(layer_ctx, layer, x.data(), tokens, y.data());
        expert_layer_backward<bf16>(layer_ctx, layer, saved, x.data(), tokens, dy.data(), layer_dx.data(),
                                    grad_router.data(), g1.data(), g2.data());
      },
      3);
  out << "layer forward + backward (" << best->name << "), 1 GPU: " << step_s * 1e3 << " ms, "
      << 3 * flops / step_s / 1e12 << " TFLOP/s of expert math (" << percent(3 * flops / step_s, bf16_flops_per_s)
      << " of 989, " << percent(3 * flops / step_s, dense_rate) << " of dense cuBLAS)\n";
  ctx.synchronize();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (visible_device_count() == 0) {
    std::cout << "skipped: no GPU\n";
    return 0;
  }
  // The figures measured before an error are kept: a device fault in one way must not lose the others.
  std::ostringstream report;
  int status = 1;
  try {
    status = run(report);
  } catch (const std::exception& e) {
    report << "cuda_bench: stopped: " << e.what() << "\n";
    std::cerr << "cuda_bench: " << e.what() << "\n";
  }
  std::cout << report.str();
  if (argc > 1) std::ofstream(argv[1]) << report.str();
  return status;
}
