// KernelBackend: the data work of the parallel system behind one interface (docs/architecture.md), so that the control
// code (dispatchers, the layer, the step) exists once and runs its arithmetic on the CPU or on a GPU.
//
// The interface is what the dispatchers and the layer compute on token rows:
//   gather_rows       out[i] = x[rows[i]]                       permute, chunk sort, every row gather
//   scatter_add_rows  out = 0; out[rows[i]] += y[i], i rising   unpermute, combine, the gathers' backward
//   grouped SwiGLU    forward and backward over the local experts' ETP shards (distributed/kernels/grouped_swiglu.hpp)
// Which rows go where is decided by the caller on the host and passed as index lists; a backend only moves and
// computes. Data crosses the interface as host matrices, so collectives stay on the host communicators; a device
// backend stages each call (upload, kernel, download). That is slow, and meant for checking a backend's kernels
// inside the real dispatchers against the oracle, not for speed.
// Overloads for double and float: the step runs in either precision (train_step.hpp, StepOptions::precision).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "distributed/kernels/expert_kernel_types.hpp"
#include "reference/tensor.hpp"

namespace moe::dist {

using RowIndex = std::vector<std::int64_t>;

class KernelBackend {
 public:
  virtual ~KernelBackend() = default;
  virtual std::string_view name() const = 0;

  virtual Matrix<double> gather_rows(const Matrix<double>& x, const RowIndex& rows) const = 0;
  virtual Matrix<float> gather_rows(const Matrix<float>& x, const RowIndex& rows) const = 0;

  // A new [out_rows, y.cols()] matrix: zero, plus y[i] added into row rows[i] in increasing i (every caller
  // starts from zeros, so a device backend need not upload them); every rows[i] lies in [0, out_rows).
  virtual Matrix<double> scatter_add_rows(const Matrix<double>& y, const RowIndex& rows,
                                          Eigen::Index out_rows) const = 0;
  virtual Matrix<float> scatter_add_rows(const Matrix<float>& y, const RowIndex& rows, Eigen::Index out_rows) const = 0;

  virtual kernels::GroupedSwigluForward<double> grouped_swiglu_forward(const Matrix<double>& x,
                                                                       const RowIndex& group_sizes,
                                                                       const kernels::ExpertShards<double>& w,
                                                                       const Vector<double>& probs,
                                                                       const kernels::SwigluOptions& options) const = 0;
  virtual kernels::GroupedSwigluForward<float> grouped_swiglu_forward(const Matrix<float>& x,
                                                                      const RowIndex& group_sizes,
                                                                      const kernels::ExpertShards<float>& w,
                                                                      const Vector<float>& probs,
                                                                      const kernels::SwigluOptions& options) const = 0;

  // Accumulates into grads (shapes of w).
  virtual kernels::GroupedSwigluBackward<double> grouped_swiglu_backward(
      const Matrix<double>& x, const RowIndex& group_sizes, const kernels::ExpertShards<double>& w,
      const Vector<double>& probs, const kernels::SwigluOptions& options, const Matrix<double>& pre,
      const Matrix<double>& dy, kernels::ExpertShards<double>& grads) const = 0;
  virtual kernels::GroupedSwigluBackward<float> grouped_swiglu_backward(
      const Matrix<float>& x, const RowIndex& group_sizes, const kernels::ExpertShards<float>& w,
      const Vector<float>& probs, const kernels::SwigluOptions& options, const Matrix<float>& pre,
      const Matrix<float>& dy, kernels::ExpertShards<float>& grads) const = 0;
};

// A backend written once for both precisions: Impl provides one member template per operation,
//   gather<T>(x, rows), scatter_add<T>(y, rows, out_rows), swiglu_forward<T>(x, group_sizes, w, probs, options),
//   swiglu_backward<T>(x, group_sizes, w, probs, options, pre, dy, grads),
// and this class turns them into the interface's double and float overloads (make it a friend if they are
// private).
template <typename Impl>
class KernelBackendOf : public KernelBackend {
 public:
  Matrix<double> gather_rows(const Matrix<double>& x, const RowIndex& rows) const final {
    return impl().gather(x, rows);
  }
  Matrix<float> gather_rows(const Matrix<float>& x, const RowIndex& rows) const final { return impl().gather(x, rows); }

  Matrix<double> scatter_add_rows(const Matrix<double>& y, const RowIndex& rows, Eigen::Index out_rows) const final {
    return impl().scatter_add(y, rows, out_rows);
  }
  Matrix<float> scatter_add_rows(const Matrix<float>& y, const RowIndex& rows, Eigen::Index out_rows) const final {
    return impl().scatter_add(y, rows, out_rows);
  }

  kernels::GroupedSwigluForward<double> grouped_swiglu_forward(const Matrix<double>& x, const RowIndex& group_sizes,
                                                               const kernels::ExpertShards<double>& w,
                                                               const Vector<double>& probs,
                                                               const kernels::SwigluOptions& options) const final {
    return impl().swiglu_forward(x, group_sizes, w, probs, options);
  }
  kernels::GroupedSwigluForward<float> grouped_swiglu_forward(const Matrix<float>& x, const RowIndex& group_sizes,
                                                              const kernels::ExpertShards<float>& w,
                                                              const Vector<float>& probs,
                                                              const kernels::SwigluOptions& options) const final {
    return impl().swiglu_forward(x, group_sizes, w, probs, options);
  }

  kernels::GroupedSwigluBackward<double> grouped_swiglu_backward(
      const Matrix<double>& x, const RowIndex& group_sizes, const kernels::ExpertShards<double>& w,
      const Vector<double>& probs, const kernels::SwigluOptions& options, const Matrix<double>& pre,
      const Matrix<double>& dy, kernels::ExpertShards<double>& grads) const final {
    return impl().swiglu_backward(x, group_sizes, w, probs, options, pre, dy, grads);
  }
  kernels::GroupedSwigluBackward<float> grouped_swiglu_backward(
      const Matrix<float>& x, const RowIndex& group_sizes, const kernels::ExpertShards<float>& w,
      const Vector<float>& probs, const kernels::SwigluOptions& options, const Matrix<float>& pre,
      const Matrix<float>& dy, kernels::ExpertShards<float>& grads) const final {
    return impl().swiglu_backward(x, group_sizes, w, probs, options, pre, dy, grads);
  }

 private:
  const Impl& impl() const { return static_cast<const Impl&>(*this); }
};

// Eigen + OpenMP (token_kernels.hpp, grouped_swiglu.hpp); stateless, shared by every thread.
const KernelBackend& cpu_kernels();

}  // namespace moe::dist
