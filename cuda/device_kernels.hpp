// DeviceKernels: the CUDA backend of dist::KernelBackend (distributed/kernels/kernel_backend.hpp). The dispatchers, the
// layer and the training step run unchanged; their row moves and grouped SwiGLU run as this backend's kernels on
// the GPU (token_kernels.hpp, grouped_swiglu.hpp):
//   gather_rows       → gather_rows kernel (int32 row index)
//   scatter_add_rows  → scatter_add_rows kernel into zeroed device rows over a host-built ScatterPlan (same order of
//                       accumulation as the CPU)
//   grouped SwiGLU    → the grouped GEMMs of the context (CUTLASS's one launch where built, else cuBLAS on lanes;
//                       or the batch-invariant GEMM) and the SwiGLU kernels. A float step with bf16 storage whose
//                       operands hold bf16 values (x, dy, the weights; probabilities after the activation) runs its
//                       GEMMs on bf16 copies with fp32 accumulation (GemmOperands::bf16, grouped_swiglu.hpp): the
//                       bf16 kernel the benchmark times, checked inside the real system
// Each call stages its operands: upload on the calling thread's stream, kernels, download, synchronise. So the
// collectives between calls stay on the host communicators (in-process ranks or MPI), and several in-process
// ranks share one GPU. This is for checking the kernels inside the real system against the oracle, not for speed
// (cuda/bench_moe_layer.cpp measures the kernels on device-resident data).
// Every thread gets its own DeviceContext (stream and cuBLAS handle) per (device, GEMM mode), created on first use.
#pragma once

#include "cuda/device_context.hpp"
#include "distributed/kernels/kernel_backend.hpp"

#include <atomic>
#include <cstdint>

namespace moe::cuda {

class DeviceKernels final : public dist::KernelBackendOf<DeviceKernels> {
 public:
  explicit DeviceKernels(int device = 0, GemmMode mode = GemmMode::cublas);

  std::string_view name() const override;

  // Kernel calls that reached the device (calls with no rows return early and are not counted): proof in the
  // tests that the step really ran here.
  std::int64_t device_calls() const { return device_calls_.load(); }
  // Grouped SwiGLU calls whose GEMMs ran on bf16 operands, and grouped GEMMs that the CUTLASS way ran on lanes
  // instead (device_context.hpp): what `check` reports of the device path.
  std::int64_t bf16_operand_calls() const { return bf16_operand_calls_.load(); }
  std::int64_t grouped_fallbacks() const { return grouped_fallbacks_.load(); }

 private:
  friend class dist::KernelBackendOf<DeviceKernels>;

  const DeviceContext& context() const;  // this thread's, on device_
  template <typename T>
  Matrix<T> gather(const Matrix<T>& x, const dist::RowIndex& rows) const;
  template <typename T>
  Matrix<T> scatter_add(const Matrix<T>& y, const dist::RowIndex& rows, Eigen::Index out_rows) const;
  template <typename T>
  kernels::GroupedSwigluForward<T> swiglu_forward(const Matrix<T>& x, const dist::RowIndex& group_sizes,
                                                  const kernels::ExpertShards<T>& w, const Vector<T>& probs,
                                                  const kernels::SwigluOptions& options) const;
  template <typename T>
  kernels::GroupedSwigluBackward<T> swiglu_backward(const Matrix<T>& x, const dist::RowIndex& group_sizes,
                                                    const kernels::ExpertShards<T>& w, const Vector<T>& probs,
                                                    const kernels::SwigluOptions& options, const Matrix<T>& pre,
                                                    const Matrix<T>& dy, kernels::ExpertShards<T>& grads) const;

  int device_;
  GemmMode mode_;
  mutable std::atomic<std::int64_t> device_calls_{0};
  mutable std::atomic<std::int64_t> bf16_operand_calls_{0};
  mutable std::atomic<std::int64_t> grouped_fallbacks_{0};
};

}  // namespace moe::cuda
