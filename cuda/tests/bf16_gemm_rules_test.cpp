// On the CPU, what decides where a bf16 GEMM runs: which problems the CUTLASS grouped kernel takes (cutlass_takes:
// TMA's alignment in the column-major view; the grouped SwiGLU's six GEMMs at an aligned shape are all taken, each
// rule broken alone refuses, for bf16 and for float results), and which float data may be copied into bf16 exactly
// (holds_bf16_values), and that a float step with bf16 storage hands the grouped SwiGLU such data.
#include "cuda/cutlass_grouped_gemm.hpp"
#include "cuda/device_context.hpp"
#include "distributed/check/differential_check.hpp"
#include "distributed/tests/kernel_backend_cases.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <stdlib.h>

#include <atomic>
#include <cstdint>
#include <string_view>
#include <type_traits>

namespace moe::cuda {
namespace {

// Addresses are only compared for alignment here, never dereferenced.
const bf16* at(std::uintptr_t address) { return reinterpret_cast<const bf16*>(address); }
bf16* out(std::uintptr_t address) { return reinterpret_cast<bf16*>(address); }

constexpr std::int64_t n_rows = 40, w = 64, d = 48;
constexpr std::uintptr_t base = 0x10000;

TEST(CutlassRules, TheGroupedSwigluGemmsAtAnAlignedShapeAreTaken) {
  // The shapes of cuda/grouped_swiglu.cpp for one expert's n rows, 16-byte aligned buffers.
  const auto takes = [](Op op_a, Op op_b, const GemmProblem<bf16>& p) { return cutlass_takes(op_a, op_b, p); };
  EXPECT_TRUE(takes(Op::n, Op::t, {n_rows, 2 * d, w, at(base), w, at(base), w, out(base), 2 * d}));  // fc1
  EXPECT_TRUE(takes(Op::n, Op::t, {n_rows, w, d, at(base), d, at(base), d, out(base), w}));          // fc2
  EXPECT_TRUE(takes(Op::n, Op::n, {n_rows, d, w, at(base), w, at(base), d, out(base), d}));          // g_h
  EXPECT_TRUE(takes(Op::t, Op::n, {w, d, n_rows, at(base), w, at(base), d, out(base), d}));          // dfc2
  EXPECT_TRUE(takes(Op::n, Op::n, {n_rows, w, 2 * d, at(base), 2 * d, at(base), w, out(base), w}));  // dx
  EXPECT_TRUE(takes(Op::t, Op::n, {2 * d, w, n_rows, at(base), 2 * d, at(base), w, out(base), w}));  // dfc1
  // Any row count: rows are never a contiguous extent here.
  EXPECT_TRUE(takes(Op::n, Op::t, {37, 2 * d, w, at(base), w, at(base), w, out(base), 2 * d}));
}

TEST(CutlassRules, EachBrokenRuleRefuses) {
  const GemmProblem<bf16> fc1{n_rows, 2 * d, w, at(base), w, at(base), w, out(base), 2 * d};
  ASSERT_TRUE(cutlass_takes(Op::n, Op::t, fc1));
  auto with = [&](auto change) {
    GemmProblem<bf16> p = fc1;
    change(p);
    return cutlass_takes(Op::n, Op::t, p);
  };
  EXPECT_FALSE(with([](auto& p) { p.a = at(base + 8); })) << "A not 16-byte aligned";
  EXPECT_FALSE(with([](auto& p) { p.b = at(base + 2); })) << "B not 16-byte aligned";
  EXPECT_FALSE(with([](auto& p) { p.c = out(base + 4); })) << "C not 16-byte aligned";
  EXPECT_FALSE(with([](auto& p) { p.lda = w + 4; })) << "lda not a multiple of 8";
  EXPECT_FALSE(with([](auto& p) { p.ldb = w + 1; })) << "ldb not a multiple of 8";
  EXPECT_FALSE(with([](auto& p) { p.ldc = 2 * d + 2; })) << "ldc not a multiple of 8";
  EXPECT_FALSE(with([](auto& p) { p.k = 60; })) << "K (contiguous in A' and B') not a multiple of 8";
  EXPECT_FALSE(with([](auto& p) { p.n = 90; })) << "N (contiguous in C') not a multiple of 8";
  EXPECT_FALSE(with([](auto& p) { p.k = 0; })) << "k = 0";
  EXPECT_FALSE(cutlass_takes(Op::t, Op::t, fc1)) << "ops (t, t) have no kernel";
  // In the weight gradient (t, n) our A's contiguous extent is m, our B's is n.
  const GemmProblem<bf16> dfc2{w, d, n_rows, at(base), w, at(base), d, out(base), d};
  ASSERT_TRUE(cutlass_takes(Op::t, Op::n, dfc2));
  GemmProblem<bf16> odd_m = dfc2;
  odd_m.m = 60;
  EXPECT_FALSE(cutlass_takes(Op::t, Op::n, odd_m));
  GemmProblem<bf16> odd_k = dfc2;
  odd_k.k = 37;  // the token count: not contiguous anywhere
  EXPECT_TRUE(cutlass_takes(Op::t, Op::n, odd_k));
}

TEST(CutlassRules, AFloatResultNeedsItsOwn16Bytes) {
  // Float C: 4 per 16 bytes, so n = 4 and ldc = 4 fit where bf16 C needs 8.
  const GemmProblem<bf16, float> p{n_rows, 4, w, at(base), w, at(base), w, reinterpret_cast<float*>(base), 4};
  EXPECT_TRUE(cutlass_takes(Op::n, Op::t, p));
  GemmProblem<bf16, float> odd = p;
  odd.ldc = 6;
  EXPECT_FALSE(cutlass_takes(Op::n, Op::t, odd));
}

TEST(Bf16Operands, OnlyValuesOnTheBf16GridAreHeld) {
  const float on[] = {0.0f, -0.0f, 1.0f, 1.0f + 0x1p-7f, -3.5f, 0x1p-130f, 0x1.fep127f, INFINITY};
  EXPECT_TRUE(holds_bf16_values(on, sizeof on / sizeof *on));
  EXPECT_TRUE(holds_bf16_values(on, 0));
  for (const float off : {1.0f + 0x1p-8f, 0.1f, 3.0e-39f + 1e-45f, NAN}) {
    const float values[] = {1.0f, off};
    EXPECT_FALSE(holds_bf16_values(values, 2)) << off;
  }
}

// The grouped GEMM a new DeviceContext uses: CUTLASS where built, unless $MOE_GROUPED_GEMM names another way.
TEST(GroupedGemmChoice, TheEnvironmentSetsTheKernelAside) {
  ::unsetenv("MOE_GROUPED_GEMM");
  EXPECT_EQ(default_grouped_gemm(), cutlass_grouped_available() ? GroupedGemm::cutlass : GroupedGemm::lanes);
  ::setenv("MOE_GROUPED_GEMM", "lanes", 1);
  EXPECT_EQ(default_grouped_gemm(), GroupedGemm::lanes);
  ::setenv("MOE_GROUPED_GEMM", "per_group", 1);
  EXPECT_EQ(default_grouped_gemm(), GroupedGemm::per_group);
  ::setenv("MOE_GROUPED_GEMM", "cutlass", 1);
  if (cutlass_grouped_available()) {
    EXPECT_EQ(default_grouped_gemm(), GroupedGemm::cutlass);
  } else {
    EXPECT_THROW(default_grouped_gemm(), std::invalid_argument);
  }
  ::setenv("MOE_GROUPED_GEMM", "wgmma", 1);
  try {
    default_grouped_gemm();
    ADD_FAILURE() << "an unknown way must be refused";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("one_launch, lanes, per_group, cutlass"), std::string::npos) << e.what();
  }
  ::unsetenv("MOE_GROUPED_GEMM");
}

// Forwards to the CPU backend and counts the float grouped SwiGLU calls whose GEMM operands (x, dy, the weights) all
// hold bf16 values: those the CUDA backend runs on bf16 operands (DeviceKernels).
class OperandGrid final : public dist::KernelBackendOf<OperandGrid> {
 public:
  std::string_view name() const override { return "operand grid"; }
  mutable std::atomic<int> calls{0}, on_grid{0};

  template <typename T>
  Matrix<T> gather(const Matrix<T>& x, const dist::RowIndex& rows) const { return cpu().gather_rows(x, rows); }
  template <typename T>
  Matrix<T> scatter_add(const Matrix<T>& y, const dist::RowIndex& rows, Eigen::Index out_rows) const {
    return cpu().scatter_add_rows(y, rows, out_rows);
  }
  template <typename T>
  kernels::GroupedSwigluForward<T> swiglu_forward(const Matrix<T>& x, const dist::RowIndex& sizes,
                                                  const kernels::ExpertShards<T>& shards, const Vector<T>& p,
                                                  const kernels::SwigluOptions& o) const {
    count(x, x, shards);
    return cpu().grouped_swiglu_forward(x, sizes, shards, p, o);
  }
  template <typename T>
  kernels::GroupedSwigluBackward<T> swiglu_backward(const Matrix<T>& x, const dist::RowIndex& sizes,
                                                    const kernels::ExpertShards<T>& shards, const Vector<T>& p,
                                                    const kernels::SwigluOptions& o, const Matrix<T>& pre,
                                                    const Matrix<T>& dy, kernels::ExpertShards<T>& grads) const {
    count(x, dy, shards);
    return cpu().grouped_swiglu_backward(x, sizes, shards, p, o, pre, dy, grads);
  }

 private:
  static const dist::KernelBackend& cpu() { return dist::cpu_kernels(); }
  template <typename T>
  void count(const Matrix<T>& x, const Matrix<T>& dy, const kernels::ExpertShards<T>& shards) const {
    if constexpr (std::is_same_v<T, float>) {
      ++calls;
      bool held = holds_bf16_values(x.data(), std::size_t(x.size())) &&
                  holds_bf16_values(dy.data(), std::size_t(dy.size()));
      for (const auto* part : {&shards.fc1, &shards.fc2})
        for (const auto& m : *part) held = held && holds_bf16_values(m.data(), std::size_t(m.size()));
      on_grid += held;
    }
  }
};

// Inside the real step (dispatchers, EP × ETP, forward and backward), a float step with bf16 storage hands the
// grouped SwiGLU operands on the bf16 grid, every call: so `check --kernels cuda --dtype bf16` runs the device's
// GEMMs on bf16 operands, the kernel the benchmark times.
TEST(Bf16Operands, AFloatStepWithBf16StorageHandsTheGroupedSwigluBf16Values) {
  const dist::BackendCase c{"bf16_storage", ParallelLayout{.world = 4, .ep = 2, .etp = 2},
                            dist::DispatcherKind::alltoall, Precision::float32,
                            [](ModelConfig& m) { m.layer.bf16_storage = true; }};
  OperandGrid grid;
  const dist::CheckProblem p = dist::backend_problem(c, grid);
  dist::check_inproc(p, dist::oracle_step(p));
  EXPECT_GT(grid.calls.load(), 0);
  EXPECT_EQ(grid.on_grid.load(), grid.calls.load());

  // Without bf16 storage the same float step's operands are off the grid: none would take the bf16 GEMMs.
  dist::BackendCase plain = c;
  plain.change = [](ModelConfig&) {};
  OperandGrid float_grid;
  const dist::CheckProblem q = dist::backend_problem(plain, float_grid);
  dist::check_inproc(q, dist::oracle_step(q));
  EXPECT_GT(float_grid.calls.load(), 0);
  EXPECT_EQ(float_grid.on_grid.load(), 0);
}

}  // namespace
}  // namespace moe::cuda
