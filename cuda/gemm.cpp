#include "cuda/gemm.hpp"

#include "cuda/grouped_gemm.hpp"

#include "cuda/bfloat16.hpp"
#include "cuda/cublas_library.hpp"
#include "cuda/cuda_error.hpp"
#include "cuda/cutlass_grouped_gemm.hpp"
#include "cuda/device_buffer.hpp"

#include <algorithm>
#include <climits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace moe::cuda {
namespace {

int as_int(std::int64_t v, const char* what) {
  if (v < 0 || v > INT_MAX)
    throw std::invalid_argument(std::string("gemm: ") + what + " = " + std::to_string(v) +
                                " (cuBLAS takes dimensions in [0, INT_MAX])");
  return static_cast<int>(v);
}

cublasOperation_t cublas_op(Op op) { return op == Op::n ? CUBLAS_OP_N : CUBLAS_OP_T; }

template <typename T>
constexpr cudaDataType_t data_type() {
  if constexpr (std::is_same_v<T, double>) return CUDA_R_64F;
  else if constexpr (std::is_same_v<T, float>) return CUDA_R_32F;
  else return CUDA_R_16BF;
}

void check_beta(int beta) {
  if (beta != 0 && beta != 1) throw std::invalid_argument("gemm: beta must be 0 (overwrite) or 1 (accumulate)");
}

// One problem through cublasGemmEx on `handle` (its stream): column-major Cᵀ[n, m] = op(B)ᵀ·op(A)ᵀ (gemm.hpp).
template <typename T, typename Out>
void cublas_gemm(cublasHandle_t handle, Op op_a, Op op_b, const GemmProblem<T, Out>& p, int beta) {
  const int M = as_int(p.n, "n"), N = as_int(p.m, "m"), K = as_int(p.k, "k");
  const int LDA = as_int(p.ldb, "ldb"), LDB = as_int(p.lda, "lda"), LDC = as_int(p.ldc, "ldc");
  if constexpr (std::is_same_v<T, double>) {
    const double alpha_d = 1.0, beta_d = beta;
    MOE_CUBLAS_CHECK(cublas().gemm_ex(handle, cublas_op(op_b), cublas_op(op_a), M, N, K, &alpha_d, p.b, CUDA_R_64F,
                                      LDA, p.a, CUDA_R_64F, LDB, &beta_d, p.c, CUDA_R_64F, LDC, CUBLAS_COMPUTE_64F,
                                      CUBLAS_GEMM_DEFAULT));
  } else {
    const float alpha_f = 1.0f, beta_f = static_cast<float>(beta);
    MOE_CUBLAS_CHECK(cublas().gemm_ex(handle, cublas_op(op_b), cublas_op(op_a), M, N, K, &alpha_f, p.b,
                                      data_type<T>(), LDA, p.a, data_type<T>(), LDB, &beta_f, p.c, data_type<Out>(),
                                      LDC, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
}

// GroupedGemm::lanes: problem i on lane i mod L, after the work already on ctx.stream(); ctx.stream() then waits
// for every lane, so the caller sees one ordered stream.
template <typename T, typename Out>
void on_lanes(const DeviceContext& ctx, Op op_a, Op op_b, std::span<const GemmProblem<T, Out>> problems, int beta) {
  const auto lanes = ctx.lanes();
  const std::size_t used = std::min(lanes.size(), problems.size());
  MOE_CUDA_CHECK(cudaEventRecord(ctx.fork_event(), ctx.stream()));
  for (std::size_t l = 0; l < used; ++l) MOE_CUDA_CHECK(cudaStreamWaitEvent(lanes[l].stream, ctx.fork_event(), 0));
  for (std::size_t i = 0; i < problems.size(); ++i) cublas_gemm(lanes[i % used].handle, op_a, op_b, problems[i], beta);
  for (std::size_t l = 0; l < used; ++l) {
    MOE_CUDA_CHECK(cudaEventRecord(lanes[l].done, lanes[l].stream));
    MOE_CUDA_CHECK(cudaStreamWaitEvent(ctx.stream(), lanes[l].done, 0));
  }
}

// GroupedGemm::one_launch: cublasGemmGroupedBatchedEx with every problem its own group of one (their m, n, k
// differ). The sizes, ops and scalars are host arrays read during the call; the matrix pointers must be on the
// device, uploaded here into stream-ordered workspace.
template <typename T>
void one_launch(const DeviceContext& ctx, Op op_a, Op op_b, std::span<const GemmProblem<T>> problems, int beta) {
  const auto grouped = cublas().gemm_grouped_batched_ex;
  if (grouped == nullptr)
    throw std::runtime_error("cuBLAS: the loaded library has no cublasGemmGroupedBatchedEx (cuBLAS >= 12.5 needed); "
                             "use the lanes or per-group grouped GEMM");
  const std::size_t g = problems.size();
  const int groups = as_int(std::int64_t(g), "group count");
  std::vector<cublasOperation_t> trans_a(g, cublas_op(op_b)), trans_b(g, cublas_op(op_a));
  std::vector<int> m(g), n(g), k(g), lda(g), ldb(g), ldc(g), group_size(g, 1);
  std::vector<float> alpha(g, 1.0f), betas(g, static_cast<float>(beta));
  std::vector<const void*> pointers(3 * g);  // A (our B), then B (our A), then C, column-major view (gemm.hpp)
  for (std::size_t i = 0; i < g; ++i) {
    const auto& p = problems[i];
    m[i] = as_int(p.n, "n");
    n[i] = as_int(p.m, "m");
    k[i] = as_int(p.k, "k");
    lda[i] = as_int(p.ldb, "ldb");
    ldb[i] = as_int(p.lda, "lda");
    ldc[i] = as_int(p.ldc, "ldc");
    pointers[i] = p.b;
    pointers[g + i] = p.a;
    pointers[2 * g + i] = p.c;
  }
  DeviceBuffer<const void*> device_pointers(3 * g, ctx.stream());
  // From pageable memory: returns once the bytes are staged, so `pointers` may go at the end of this function.
  MOE_CUDA_CHECK(cudaMemcpyAsync(device_pointers.data(), pointers.data(), 3 * g * sizeof(const void*),
                                 cudaMemcpyHostToDevice, ctx.stream()));
  const void* const* a = device_pointers.data();
  MOE_CUBLAS_CHECK(grouped(ctx.cublas_handle(), trans_a.data(), trans_b.data(), m.data(), n.data(), k.data(),
                           alpha.data(), a, data_type<T>(), lda.data(), a + g, data_type<T>(), ldb.data(),
                           betas.data(), const_cast<void* const*>(a + 2 * g), data_type<T>(), ldc.data(), groups,
                           group_size.data(), CUBLAS_COMPUTE_32F));
}

}  // namespace

template <typename T>
void gemm(const DeviceContext& ctx, Op op_a, Op op_b, std::int64_t m, std::int64_t n, std::int64_t k, const T* a,
          std::int64_t lda, const T* b, std::int64_t ldb, T* c, std::int64_t ldc, int beta) {
  check_beta(beta);
  if (m == 0 || n == 0) return;
  if (ctx.mode() == GemmMode::batch_invariant) {
    batch_invariant_gemm<T>(ctx.stream(), op_a, op_b, m, n, k, a, lda, b, ldb, c, ldc, beta);
    return;
  }
  cublas_gemm<T, T>(ctx.cublas_handle(), op_a, op_b, {m, n, k, a, lda, b, ldb, c, ldc}, beta);
}

// GroupedGemm::cutlass: CUTLASS's one launch where it takes the problems (bf16 operands), else lanes, counted.
template <typename T, typename Out>
void cutlass_or_lanes(const DeviceContext& ctx, Op op_a, Op op_b, const std::vector<GemmProblem<T, Out>>& live,
                      int beta) {
  if constexpr (std::is_same_v<T, bf16>) {
    if (cutlass_grouped_gemm(ctx.stream(), op_a, op_b, live.data(), live.size(), beta)) return;
    ctx.count_grouped_fallback();
  }
  on_lanes<T, Out>(ctx, op_a, op_b, live, beta);
}

// The problems with an output (m, n > 0): the others have nothing to compute.
template <typename T, typename Out>
std::vector<GemmProblem<T, Out>> live_problems(std::span<const GemmProblem<T, Out>> problems) {
  std::vector<GemmProblem<T, Out>> live;
  live.reserve(problems.size());
  for (const auto& p : problems)
    if (p.m > 0 && p.n > 0) live.push_back(p);
  return live;
}

template <typename T>
void grouped_gemm(const DeviceContext& ctx, Op op_a, Op op_b, std::span<const GemmProblem<T>> problems, int beta) {
  check_beta(beta);
  const std::vector<GemmProblem<T>> live = live_problems(problems);
  if (live.empty()) return;
  if (ctx.mode() == GemmMode::batch_invariant) {
    for (const auto& p : live)
      batch_invariant_gemm<T>(ctx.stream(), op_a, op_b, p.m, p.n, p.k, p.a, p.lda, p.b, p.ldb, p.c, p.ldc, beta);
    return;
  }
  switch (ctx.grouped()) {
    case GroupedGemm::cutlass:
      cutlass_or_lanes<T, T>(ctx, op_a, op_b, live, beta);
      return;
    case GroupedGemm::one_launch:
      if constexpr (!std::is_same_v<T, double>) {
        one_launch<T>(ctx, op_a, op_b, live, beta);
        return;
      }
      [[fallthrough]];
    case GroupedGemm::lanes:
      on_lanes<T, T>(ctx, op_a, op_b, live, beta);
      return;
    case GroupedGemm::per_group:
      for (const auto& p : live) cublas_gemm<T>(ctx.cublas_handle(), op_a, op_b, p, beta);
      return;
  }
}

void grouped_gemm_bf16_operands(const DeviceContext& ctx, Op op_a, Op op_b,
                                std::span<const GemmProblem<bf16, float>> problems, int beta) {
  check_beta(beta);
  const std::vector<GemmProblem<bf16, float>> live = live_problems(problems);
  if (live.empty()) return;
  if (ctx.mode() == GemmMode::batch_invariant)
    throw std::invalid_argument("grouped GEMM on bf16 operands: the batch-invariant GEMM takes one type throughout");
  if (ctx.grouped() == GroupedGemm::cutlass) cutlass_or_lanes<bf16, float>(ctx, op_a, op_b, live, beta);
  else on_lanes<bf16, float>(ctx, op_a, op_b, live, beta);
}

#define MOE_INSTANTIATE_GEMM(T)                                                                                    \
  template void gemm<T>(const DeviceContext&, Op, Op, std::int64_t, std::int64_t, std::int64_t, const T*,          \
                        std::int64_t, const T*, std::int64_t, T*, std::int64_t, int);                              \
  template void grouped_gemm<T>(const DeviceContext&, Op, Op, std::span<const GemmProblem<T>>, int);
MOE_INSTANTIATE_GEMM(double)
MOE_INSTANTIATE_GEMM(float)
MOE_INSTANTIATE_GEMM(bf16)

}  // namespace moe::cuda
