// The CPU backend of KernelBackend: each operation forwards to the Eigen + OpenMP kernels.
#include "distributed/kernels/grouped_swiglu.hpp"
#include "distributed/kernels/kernel_backend.hpp"
#include "distributed/kernels/token_kernels.hpp"

namespace moe::dist {
namespace {

class CpuKernels final : public KernelBackendOf<CpuKernels> {
 public:
  std::string_view name() const override { return "cpu"; }

  template <typename T>
  Matrix<T> gather(const Matrix<T>& x, const RowIndex& rows) const {
    return kernels::gather_rows(x, rows);
  }
  template <typename T>
  Matrix<T> scatter_add(const Matrix<T>& y, const RowIndex& rows, Eigen::Index out_rows) const {
    Matrix<T> out = Matrix<T>::Zero(out_rows, y.cols());
    kernels::scatter_add_rows(y, rows, {}, out);
    return out;
  }
  template <typename T>
  kernels::GroupedSwigluForward<T> swiglu_forward(const Matrix<T>& x, const RowIndex& group_sizes,
                                                  const kernels::ExpertShards<T>& w, const Vector<T>& probs,
                                                  const kernels::SwigluOptions& options) const {
    return kernels::grouped_swiglu_forward(x, group_sizes, w, probs, options);
  }
  template <typename T>
  kernels::GroupedSwigluBackward<T> swiglu_backward(const Matrix<T>& x, const RowIndex& group_sizes,
                                                    const kernels::ExpertShards<T>& w, const Vector<T>& probs,
                                                    const kernels::SwigluOptions& options, const Matrix<T>& pre,
                                                    const Matrix<T>& dy, kernels::ExpertShards<T>& grads) const {
    return kernels::grouped_swiglu_backward(x, group_sizes, w, probs, options, pre, dy, grads);
  }
};

}  // namespace

const KernelBackend& cpu_kernels() {
  static const CpuKernels backend;
  return backend;
}

}  // namespace moe::dist
