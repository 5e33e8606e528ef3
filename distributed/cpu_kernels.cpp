// The CPU backend of KernelBackend: each call forwards to the Eigen + OpenMP kernels.
#include "distributed/kernel_backend.hpp"
#include "distributed/token_kernels.hpp"

namespace moe::dist {
namespace {

class CpuKernels final : public KernelBackend {
 public:
  std::string_view name() const override { return "cpu"; }

  Matrix<double> gather_rows(const Matrix<double>& x, const RowIndex& rows) const override {
    return kernels::gather_rows(x, rows);
  }
  Matrix<float> gather_rows(const Matrix<float>& x, const RowIndex& rows) const override {
    return kernels::gather_rows(x, rows);
  }

  void scatter_add_rows(const Matrix<double>& y, const RowIndex& rows, Matrix<double>& out) const override {
    kernels::scatter_add_rows(y, rows, {}, out);
  }
  void scatter_add_rows(const Matrix<float>& y, const RowIndex& rows, Matrix<float>& out) const override {
    kernels::scatter_add_rows(y, rows, {}, out);
  }

  kernels::GroupedSwigluForward<double> grouped_swiglu_forward(const Matrix<double>& x, const RowIndex& group_sizes,
                                                               const kernels::ExpertShards<double>& w,
                                                               const Vector<double>& probs,
                                                               const kernels::SwigluOptions& options) const override {
    return kernels::grouped_swiglu_forward(x, group_sizes, w, probs, options);
  }
  kernels::GroupedSwigluForward<float> grouped_swiglu_forward(const Matrix<float>& x, const RowIndex& group_sizes,
                                                              const kernels::ExpertShards<float>& w,
                                                              const Vector<float>& probs,
                                                              const kernels::SwigluOptions& options) const override {
    return kernels::grouped_swiglu_forward(x, group_sizes, w, probs, options);
  }

  kernels::GroupedSwigluBackward<double> grouped_swiglu_backward(const Matrix<double>& x, const RowIndex& group_sizes,
                                                                 const kernels::ExpertShards<double>& w,
                                                                 const Vector<double>& probs,
                                                                 const kernels::SwigluOptions& options,
                                                                 const Matrix<double>& pre, const Matrix<double>& dy,
                                                                 kernels::ExpertShards<double>& grads) const override {
    return kernels::grouped_swiglu_backward(x, group_sizes, w, probs, options, pre, dy, grads);
  }
  kernels::GroupedSwigluBackward<float> grouped_swiglu_backward(const Matrix<float>& x, const RowIndex& group_sizes,
                                                                const kernels::ExpertShards<float>& w,
                                                                const Vector<float>& probs,
                                                                const kernels::SwigluOptions& options,
                                                                const Matrix<float>& pre, const Matrix<float>& dy,
                                                                kernels::ExpertShards<float>& grads) const override {
    return kernels::grouped_swiglu_backward(x, group_sizes, w, probs, options, pre, dy, grads);
  }
};

}  // namespace

const KernelBackend& cpu_kernels() {
  static const CpuKernels backend;
  return backend;
}

}  // namespace moe::dist
