// The SwiGLU clamp's gradient at exactly ±L, in the reference and in the CPU grouped SwiGLU alike. In float64 no
// value lands on the limit; in bf16 many do, and there torch's versions differ (2.15 passes no gradient, 2.11 passes
// it): a Megatron bf16 layer failed compare in four tensors, on CPU under one torch and on a GPU under the other,
// until the oracle named both (megatron_bridge/gpu_capture.py, the clamp case).
#include "distributed/kernels/grouped_swiglu.hpp"
#include "reference/swiglu.hpp"

#include <gtest/gtest.h>

namespace moe::kernels {
namespace {

// Both conventions: the minimum-norm subgradient 0 (intended; torch 2.15) and 1 (clamp-limit-passes-gradient;
// torch 2.11), through the reference and the grouped kernel alike.
TEST(SwigluClampLimit, TheGradientAtTheLimitInTheReferenceAndTheGroupedKernel) {
  const double L = 0.5;
  // d = 2: gate [L, L/2] (the first on the limit), up [−L, L/4] (the first on it); the second column inside.
  Vector<double> pre(4);
  pre << L, L / 2, -L, 0.25;
  for (bool limit_passes : {false, true}) {
    SCOPED_TRACE(limit_passes ? "subgradient 1 at the limit" : "subgradient 0 at the limit");
    const Vector<double> ref = swiglu_activation_backward<double>(pre, L, limit_passes, Vector<double>::Ones(2));
    EXPECT_EQ(ref(0) != 0.0, limit_passes);  // gate at +L
    EXPECT_NE(ref(1), 0.0);                  // gate inside
    EXPECT_EQ(ref(2) != 0.0, limit_passes);  // up at −L
    EXPECT_NE(ref(3), 0.0);                  // up inside

    // The same pre-activations through the grouped kernel: one expert, one row x = e₀, so pre = fc1's first
    // column, fc2 = I and dy = 1: the fc1 gradient's first column is the activation's gradient.
    Matrix<double> x(1, 2);
    x << 1, 0;
    ExpertShards<double> w{{Matrix<double>::Zero(4, 2)}, {Matrix<double>::Identity(2, 2)}};
    w.fc1[0].col(0) = pre;
    ExpertShards<double> grads{{Matrix<double>::Zero(4, 2)}, {Matrix<double>::Zero(2, 2)}};
    const SwigluOptions options{L, false, false, limit_passes};
    const Vector<double> probs = Vector<double>::Ones(1);
    const auto f = grouped_swiglu_forward<double>(x, {1}, w, probs, options);
    grouped_swiglu_backward<double>(x, {1}, w, probs, options, f.pre, Matrix<double>::Ones(1, 2), grads);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(grads.fc1[0](i, 0), ref(i)) << "entry " << i;
  }
}

}  // namespace
}  // namespace moe::kernels
