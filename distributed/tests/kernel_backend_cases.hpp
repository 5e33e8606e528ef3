// The conformance set of a KernelBackend (kernel_backend.hpp): whole training steps of the parallel system, with
// the backend doing the data work, compared with the global step oracle. The CPU backend runs it in
// distributed_tests; the CUDA backend in cuda_tests (on a GPU). The same cases, so a backend that passes here
// computes inside the real dispatchers what the oracle computes.
//
// The cases cover every dispatcher on EP × ETP, TP + SP with CP, and pipeline stages; float; and the layer's
// kernel-facing options: the SwiGLU clamp active, shared-expert gate, latent projection, probabilities on the
// input, drop-and-pad capacity.
#pragma once

#include "distributed/check/differential_check.hpp"
#include "distributed/kernels/kernel_backend.hpp"

#include <array>
#include <atomic>
#include <functional>
#include <ostream>
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
inline void PrintTo(const BackendCase& c, std::ostream* os) { *os << c.name; }  // gtest: the name, not the bytes

// tiny-v4 (2 layers, the first hash-routed) with the case's change, 8 sequences of 8 tokens with uneven padding;
// the step runs with `kernels` at the case's precision. Tolerance: the training-step row of reference/tolerance.hpp
// for that precision.
CheckProblem backend_problem(const BackendCase& c, const KernelBackend& kernels);

// Forwards to another backend and counts the calls of each operation: the proof that a step's data work really
// went through the backend under test. plant_fault(op) makes every later call of `op` add 1e-3 to the first
// element it writes (y for the forward, dx for the backward): the proof that the comparison sees that output.
class InstrumentedKernels final : public KernelBackendOf<InstrumentedKernels> {
 public:
  enum Op { gather_op, scatter_add_op, swiglu_forward_op, swiglu_backward_op, kOps };
  static constexpr std::array<Op, kOps> kEveryOp{gather_op, scatter_add_op, swiglu_forward_op, swiglu_backward_op};
  explicit InstrumentedKernels(const KernelBackend& inner) : inner_(inner) {}
  std::int64_t calls(Op op) const { return calls_[op].load(); }
  void plant_fault(Op op) { fault_ = op; }

  std::string_view name() const override { return inner_.name(); }

  template <typename T>
  Matrix<T> gather(const Matrix<T>& x, const RowIndex& rows) const {
    auto out = inner_.gather_rows(x, rows);
    after(gather_op, out, 0);
    return out;
  }
  template <typename T>
  Matrix<T> scatter_add(const Matrix<T>& y, const RowIndex& rows, Eigen::Index out_rows) const {
    auto out = inner_.scatter_add_rows(y, rows, out_rows);
    after(scatter_add_op, out, rows.empty() ? 0 : rows[0]);
    return out;
  }
  template <typename T>
  kernels::GroupedSwigluForward<T> swiglu_forward(const Matrix<T>& x, const RowIndex& group_sizes,
                                                  const kernels::ExpertShards<T>& w, const Vector<T>& probs,
                                                  const kernels::SwigluOptions& options) const {
    auto out = inner_.grouped_swiglu_forward(x, group_sizes, w, probs, options);
    after(swiglu_forward_op, out.y, 0);
    return out;
  }
  template <typename T>
  kernels::GroupedSwigluBackward<T> swiglu_backward(const Matrix<T>& x, const RowIndex& group_sizes,
                                                    const kernels::ExpertShards<T>& w, const Vector<T>& probs,
                                                    const kernels::SwigluOptions& options, const Matrix<T>& pre,
                                                    const Matrix<T>& dy, kernels::ExpertShards<T>& grads) const {
    auto out = inner_.grouped_swiglu_backward(x, group_sizes, w, probs, options, pre, dy, grads);
    after(swiglu_backward_op, out.dx, 0);
    return out;
  }

 private:
  template <typename M>
  void after(Op op, M& written, Eigen::Index row) const {
    ++calls_[op];
    if (op == fault_ && written.size() > 0) written(row, 0) += typename M::Scalar(1e-3);
  }

  const KernelBackend& inner_;
  mutable std::array<std::atomic<std::int64_t>, kOps> calls_{};
  Op fault_ = kOps;  // none
};

}  // namespace moe::dist
