// The conformance set of a KernelBackend (kernel_backend.hpp): whole training steps of the parallel system, with
// the backend doing the data work, compared with the global step oracle. The CPU backend runs it in
// distributed_tests; the CUDA backend in cuda_tests (on a GPU). The same cases, so a backend that passes here
// computes inside the real dispatchers what the oracle computes.
//
// The cases cover every dispatcher on EP × ETP, TP + SP with CP, and pipeline stages; float; and the layer's
// kernel-facing options: the SwiGLU clamp active, shared-expert gate, latent projection, probabilities on the
// input, drop-and-pad capacity.
#pragma once

#include "distributed/differential_check.hpp"
#include "distributed/kernel_backend.hpp"

#include <array>
#include <atomic>
#include <functional>
#include <string>
#include <vector>

namespace moe::dist {

struct BackendCase {
  std::string name;
  ParallelLayout layout;
  DispatcherKind dispatcher = DispatcherKind::alltoall;
  Precision precision = Precision::float64;
  std::function<void(ModelConfig&)> change = [](ModelConfig&) {};
};

std::vector<BackendCase> kernel_backend_cases();

// tiny-v4 (2 layers, the first hash-routed) with the case's change, 8 sequences of 8 tokens with uneven padding;
// the step runs with `kernels` at the case's precision. Tolerances: DESIGN §3 (double 1e-13 + 1e-9·|ref|, float
// 5e-8 + 1e-4·|ref|).
CheckProblem backend_problem(const BackendCase& c, const KernelBackend& kernels);

// Forwards to another backend and counts the calls of each operation: the proof that a step's data work really
// went through the backend under test. plant_fault(op) makes every later call of `op` add 1e-3 to the first
// element it writes (y for the forward, dx for the backward): the proof that the comparison sees that output.
class InstrumentedKernels final : public KernelBackend {
 public:
  enum Op { gather, scatter_add, swiglu_forward, swiglu_backward, kOps };
  explicit InstrumentedKernels(const KernelBackend& inner) : inner_(inner) {}
  std::int64_t calls(Op op) const { return calls_[op].load(); }
  void plant_fault(Op op) { fault_ = op; }

  std::string_view name() const override { return inner_.name(); }
  Matrix<double> gather_rows(const Matrix<double>& x, const RowIndex& rows) const override;
  Matrix<float> gather_rows(const Matrix<float>& x, const RowIndex& rows) const override;
  void scatter_add_rows(const Matrix<double>& y, const RowIndex& rows, Matrix<double>& out) const override;
  void scatter_add_rows(const Matrix<float>& y, const RowIndex& rows, Matrix<float>& out) const override;
  kernels::GroupedSwigluForward<double> grouped_swiglu_forward(const Matrix<double>& x, const RowIndex& group_sizes,
                                                               const kernels::ExpertShards<double>& w,
                                                               const Vector<double>& probs,
                                                               const kernels::SwigluOptions& options) const override;
  kernels::GroupedSwigluForward<float> grouped_swiglu_forward(const Matrix<float>& x, const RowIndex& group_sizes,
                                                              const kernels::ExpertShards<float>& w,
                                                              const Vector<float>& probs,
                                                              const kernels::SwigluOptions& options) const override;
  kernels::GroupedSwigluBackward<double> grouped_swiglu_backward(
      const Matrix<double>& x, const RowIndex& group_sizes, const kernels::ExpertShards<double>& w,
      const Vector<double>& probs, const kernels::SwigluOptions& options, const Matrix<double>& pre,
      const Matrix<double>& dy, kernels::ExpertShards<double>& grads) const override;
  kernels::GroupedSwigluBackward<float> grouped_swiglu_backward(
      const Matrix<float>& x, const RowIndex& group_sizes, const kernels::ExpertShards<float>& w,
      const Vector<float>& probs, const kernels::SwigluOptions& options, const Matrix<float>& pre,
      const Matrix<float>& dy, kernels::ExpertShards<float>& grads) const override;

 private:
  template <typename M>
  void after(Op op, M& written, Eigen::Index row) const;

  const KernelBackend& inner_;
  mutable std::array<std::atomic<std::int64_t>, kOps> calls_{};
  Op fault_ = kOps;  // none
};

}  // namespace moe::dist
