// Grouped SwiGLU forward and backward on device against kernels::grouped_swiglu_forward/backward: double and
// float against the CPU in the same type, bf16 against the CPU in double on bf16-rounded inputs; with and without
// the clamp, probabilities after the activation or on the input, bf16 storage; both GEMM modes and, with cuBLAS,
// each way of running the grouped GEMMs (one launch, lanes, per group, CUTLASS); an empty group included. CUTLASS's
// kernel takes only 16-byte aligned shapes, so bf16 runs a second, aligned shape too, where it must not fall back
// (a group of more rows than one tile, uneven groups). And the device's bf16 rounding against reference/bf16.hpp's,
// value by value.
#include "cuda/cutlass_grouped_gemm.hpp"
#include "cuda/grouped_swiglu.hpp"
#include "cuda/swiglu_kernels.hpp"
#include "cuda/tests/gpu_test.hpp"
#include "reference/bf16.hpp"

#include <limits>
#include <numeric>

namespace moe::cuda {
namespace {

using namespace testing;

// Rows per local expert, width w and ETP slice d.
struct Shape {
  std::vector<std::int64_t> groups;
  int w, d;
};
const Shape small{{3, 0, 5, 2}, 16, 12};
// Every leading dimension and contiguous extent a multiple of 8 bf16 (16 bytes): CUTLASS's TMA takes it.
const Shape aligned{{40, 0, 130, 17}, 64, 48};

struct Variant {
  const char* name;
  kernels::SwigluOptions options;
};

std::vector<Variant> variants() {
  kernels::SwigluOptions clamp;
  clamp.clamp = 0.4;
  kernels::SwigluOptions on_input;
  on_input.probs_on_input = true;
  // The model's bf16 storage points, rounded on the device where the CPU kernels round (with the clamp, and with
  // the probabilities on the input, whose fc2 gradient takes the unscaled activation).
  kernels::SwigluOptions stored = clamp;
  stored.bf16 = true;
  kernels::SwigluOptions stored_on_input = on_input;
  stored_on_input.bf16 = true;
  return {{"plain", {}}, {"clamp", clamp}, {"probs_on_input", on_input}, {"bf16 storage", stored},
          {"bf16 storage, probs_on_input", stored_on_input}};
}

// Returns the context's count of grouped GEMMs that fell back from CUTLASS to lanes.
// operands: GemmOperands::bf16 (float data) draws x, dy and the weights on the bf16 grid, as the caller promises.
template <typename T>
std::int64_t check_swiglu(GemmMode mode, const Variant& v, GroupedGemm grouped = GroupedGemm::one_launch,
                          const Shape& shape = small, GemmOperands operands = GemmOperands::as_stored) {
  SCOPED_TRACE(v.name);
  SCOPED_TRACE("grouped GEMM " + std::to_string(int(grouped)) + ", width " + std::to_string(shape.w));
  // Reference type: the CPU runs in T for double/float and in double (on rounded inputs) for bf16.
  using R = std::conditional_t<std::is_same_v<T, bf16>, double, T>;
  const auto& groups = shape.groups;
  const int w = shape.w, d = shape.d, L = int(groups.size());
  const int rows = int(std::accumulate(groups.begin(), groups.end(), std::int64_t{0}));
  const auto grid = [&](const std::vector<double>& values) {
    return operands == GemmOperands::bf16 ? rounded<bf16>(values) : rounded<T>(values);
  };
  const auto xs = grid(uniform(std::size_t(rows * w), 11)), ps = rounded<T>(uniform(std::size_t(rows), 12));
  const auto f1 = grid(uniform(std::size_t(L * 2 * d * w), 13, 0.5));
  const auto f2 = grid(uniform(std::size_t(L * w * d), 14, 0.5)), gys = grid(uniform(std::size_t(rows * w), 15));
  kernels::ExpertShards<R> shards, grads;
  for (int e = 0; e < L; ++e) {
    shards.fc1.push_back(Eigen::Map<const Matrix<double>>(f1.data() + e * 2 * d * w, 2 * d, w).cast<R>());
    shards.fc2.push_back(Eigen::Map<const Matrix<double>>(f2.data() + e * w * d, w, d).cast<R>());
    grads.fc1.push_back(Matrix<R>::Zero(2 * d, w));
    grads.fc2.push_back(Matrix<R>::Zero(w, d));
  }
  const Matrix<R> x = Eigen::Map<const Matrix<double>>(xs.data(), rows, w).cast<R>();
  const Matrix<R> dy = Eigen::Map<const Matrix<double>>(gys.data(), rows, w).cast<R>();
  const Vector<R> p = Eigen::Map<const Vector<double>>(ps.data(), rows).cast<R>();
  const auto fwd = kernels::grouped_swiglu_forward<R>(x, groups, shards, p, v.options);
  const auto bwd = kernels::grouped_swiglu_backward<R>(x, groups, shards, p, v.options, fwd.pre, dy, grads);

  DeviceContext ctx(mode, grouped);
  const auto d_x = upload(cast<T>(xs)), d_f1 = upload(cast<T>(f1)), d_f2 = upload(cast<T>(f2)),
             d_dy = upload(cast<T>(gys));
  const auto d_p = upload(cast<Acc<T>>(ps));
  DeviceBuffer<T> pre(static_cast<std::size_t>(rows * 2 * d)), y(static_cast<std::size_t>(rows * w)), dx(static_cast<std::size_t>(rows * w));
  DeviceBuffer<T> g1(f1.size()), g2(f2.size());
  DeviceBuffer<Acc<T>> dprob(static_cast<std::size_t>(rows));
  g1.zero(ctx.stream());  // accumulated into on ctx's stream
  g2.zero(ctx.stream());
  dprob.zero(ctx.stream());
  const DeviceExperts<T> ex{d_f1.data(), d_f2.data(), w, d};
  grouped_swiglu_forward<T>(ctx, d_x.data(), groups, ex, d_p.data(), v.options, pre.data(), y.data(), operands);
  grouped_swiglu_backward<T>(ctx, d_x.data(), groups, ex, d_p.data(), v.options, pre.data(), d_dy.data(), dx.data(),
                             dprob.data(), g1.data(), g2.data(), operands);
  ctx.synchronize();

  // Float with bf16 storage: a float GEMM a rounding apart from Eigen's can land on the other side of a bf16
  // rounding boundary, one bf16 ulp, so the bf16 row. Double: the sums agree to 1e-16, a flip is not expected.
  const auto tol = v.options.bf16 && std::is_same_v<T, float> ? tolerance<bf16>() : tolerance<T>();
  auto flat = [](const Matrix<R>& m) { return std::vector<R>(m.data(), m.data() + m.size()); };
  auto stack = [&](const std::vector<Matrix<R>>& ms) {
    std::vector<R> out;
    for (const auto& m : ms) out.insert(out.end(), m.data(), m.data() + m.size());
    return out;
  };
  expect_close(y.to_host(), flat(fwd.y), tol, "y");
  expect_close(pre.to_host(), flat(fwd.pre), tol, "pre");
  expect_close(dx.to_host(), flat(bwd.dx), tol, "dx");
  expect_close(dprob.to_host(), std::vector<R>(bwd.dprob.data(), bwd.dprob.data() + rows), tol, "dprob");
  expect_close(g1.to_host(), stack(grads.fc1), tol, "grad_fc1");
  expect_close(g2.to_host(), stack(grads.fc2), tol, "grad_fc2");
  return ctx.grouped_fallbacks();
}

const GroupedGemm all_grouped[] = {GroupedGemm::one_launch, GroupedGemm::lanes, GroupedGemm::per_group,
                                   GroupedGemm::cutlass};

TEST(CudaGroupedSwiglu, DoubleCublas) {
  MOE_REQUIRE_GPU();
  for (const auto g : all_grouped)
    for (const auto& v : variants()) check_swiglu<double>(GemmMode::cublas, v, g);
}
TEST(CudaGroupedSwiglu, DoubleBatchInvariant) {
  MOE_REQUIRE_GPU();
  for (const auto& v : variants()) check_swiglu<double>(GemmMode::batch_invariant, v);
}
TEST(CudaGroupedSwiglu, FloatCublas) {
  MOE_REQUIRE_GPU();
  for (const auto g : all_grouped)
    for (const auto& v : variants()) check_swiglu<float>(GemmMode::cublas, v, g);
}
TEST(CudaGroupedSwiglu, FloatBatchInvariant) {
  MOE_REQUIRE_GPU();
  for (const auto& v : variants()) check_swiglu<float>(GemmMode::batch_invariant, v);
}
TEST(CudaGroupedSwiglu, Bf16Cublas) {
  MOE_REQUIRE_GPU();
  for (const auto g : all_grouped)
    for (const auto& v : variants()) check_swiglu<bf16>(GemmMode::cublas, v, g);
}
// Every grouped GEMM of the forward and backward (the three kernels: (n, t), (n, n), (t, n)) in CUTLASS's one
// launch, none on lanes. A build without CUTLASS skips this, which tools/gpu-check counts as a failure.
TEST(CudaGroupedSwiglu, Bf16CutlassOneLaunch) {
  MOE_REQUIRE_GPU();
  if (!cutlass_grouped_available()) GTEST_SKIP() << "skipped: this build has no CUTLASS (tools/fetch-cutlass)";
  for (const auto& v : variants())
    EXPECT_EQ(check_swiglu<bf16>(GemmMode::cublas, v, GroupedGemm::cutlass, aligned), 0) << v.name;
  for (const auto& v : variants()) check_swiglu<bf16>(GemmMode::cublas, v, GroupedGemm::lanes, aligned);
}

// Float with bf16 storage on bf16 operands (GemmOperands::bf16): the GEMMs on bf16 copies with float results, on
// lanes (cuBLAS, mixed types) and through CUTLASS's float-output kernels, with no fallback at the aligned shape.
// Probabilities on the input are refused (p·x is not on the bf16 grid).
TEST(CudaGroupedSwiglu, FloatBf16StorageOnBf16Operands) {
  MOE_REQUIRE_GPU();
  for (const auto g : {GroupedGemm::lanes, GroupedGemm::cutlass})
    for (const Shape* shape : {&small, &aligned})
      for (const auto& v : variants()) {
        if (!v.options.bf16 || v.options.probs_on_input) continue;
        const auto fallbacks = check_swiglu<float>(GemmMode::cublas, v, g, *shape, GemmOperands::bf16);
        if (g == GroupedGemm::cutlass && shape == &aligned && cutlass_grouped_available()) {
          EXPECT_EQ(fallbacks, 0) << v.name;
        }
      }
  Variant on_input = variants().back();
  ASSERT_TRUE(on_input.options.probs_on_input && on_input.options.bf16);
  EXPECT_THROW(check_swiglu<float>(GemmMode::cublas, on_input, GroupedGemm::lanes, small, GemmOperands::bf16),
               std::invalid_argument);
}

// Ties to even in both directions, a carry into the next binade, bf16's subnormals, the largest finite value and
// past it, zeros, inf, NaN, and random values: the device rounds each as round_bf16 does (bit for bit; NaN stays NaN).
template <typename T>
void check_rounding() {
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> values{1.0 + 0x1p-8, 1.0 + 3 * 0x1p-8, -(1.0 + 0x1p-8), 1.0 + 0x1p-8 + 0x1p-30, 0x1.ffp0,
                             0x1p-130 * 1.5, 0x1p-133 * 0.5, 0x1p-133 * 1.5, 0x1.fe8p127, 0x1.fep127, 0.0, -0.0,
                             inf, -inf, std::numeric_limits<double>::quiet_NaN()};
  for (double v : uniform(64, 21, 1e3)) values.push_back(v);
  std::vector<T> in;
  for (double v : values) in.push_back(static_cast<T>(v));
  auto data = upload(in);
  DeviceContext ctx;
  round_to_bf16<T>(ctx.stream(), data.data(), std::int64_t(in.size()));
  ctx.synchronize();
  const auto got = data.to_host();
  for (size_t i = 0; i < in.size(); ++i) {
    const T want = round_bf16(in[i]);
    if (std::isnan(want)) EXPECT_TRUE(std::isnan(got[i])) << i;
    else EXPECT_EQ(got[i], want) << "value " << i << " = " << double(in[i]);
  }
}

TEST(CudaBf16Storage, RoundsAsTheCpuDouble) {
  MOE_REQUIRE_GPU();
  check_rounding<double>();
}
TEST(CudaBf16Storage, RoundsAsTheCpuFloat) {
  MOE_REQUIRE_GPU();
  check_rounding<float>();
}

}  // namespace
}  // namespace moe::cuda
