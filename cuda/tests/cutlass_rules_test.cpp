// Which problems the CUTLASS grouped kernel takes (cutlass_takes: TMA's alignment in the column-major view), on the
// CPU: the grouped SwiGLU's six GEMMs at an aligned shape are all taken; each rule, broken alone, refuses.
#include "cuda/cutlass_grouped_gemm.hpp"

#include <gtest/gtest.h>

#include <cstdint>

namespace moe::cuda {
namespace {

// Addresses are only compared for alignment here, never dereferenced.
const bf16* at(std::uintptr_t address) { return reinterpret_cast<const bf16*>(address); }
bf16* out(std::uintptr_t address) { return reinterpret_cast<bf16*>(address); }

constexpr std::int64_t n_rows = 40, w = 64, d = 48;
constexpr std::uintptr_t base = 0x10000;

TEST(CutlassRules, TheGroupedSwigluGemmsAtAnAlignedShapeAreTaken) {
  // The shapes of cuda/grouped_swiglu.cpp for one expert's n rows, 16-byte aligned buffers.
  EXPECT_TRUE(cutlass_takes(Op::n, Op::t, {n_rows, 2 * d, w, at(base), w, at(base), w, out(base), 2 * d}));  // fc1
  EXPECT_TRUE(cutlass_takes(Op::n, Op::t, {n_rows, w, d, at(base), d, at(base), d, out(base), w}));          // fc2
  EXPECT_TRUE(cutlass_takes(Op::n, Op::n, {n_rows, d, w, at(base), w, at(base), d, out(base), d}));          // g_h
  EXPECT_TRUE(cutlass_takes(Op::t, Op::n, {w, d, n_rows, at(base), w, at(base), d, out(base), d}));          // dfc2
  EXPECT_TRUE(cutlass_takes(Op::n, Op::n, {n_rows, w, 2 * d, at(base), 2 * d, at(base), w, out(base), w}));  // dx
  EXPECT_TRUE(cutlass_takes(Op::t, Op::n, {2 * d, w, n_rows, at(base), 2 * d, at(base), w, out(base), w}));  // dfc1
  // Any row count: rows are never a contiguous extent here.
  EXPECT_TRUE(cutlass_takes(Op::n, Op::t, {37, 2 * d, w, at(base), w, at(base), w, out(base), 2 * d}));
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

}  // namespace
}  // namespace moe::cuda
