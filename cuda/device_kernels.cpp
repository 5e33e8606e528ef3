#include "cuda/device_kernels.hpp"

#include "cuda/cuda_error.hpp"
#include "cuda/device_buffer.hpp"
#include "cuda/device_probe.hpp"
#include "cuda/grouped_swiglu.hpp"
#include "cuda/row_plans.hpp"
#include "cuda/token_kernels.hpp"

#include <initializer_list>
#include <map>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

namespace moe::cuda {
namespace {

// Host → device on the context's stream (ordered before the kernels that read it).
template <typename T>
DeviceBuffer<T> stage(const DeviceContext& ctx, const T* host, std::size_t n) {
  DeviceBuffer<T> b(n, ctx.stream());
  if (n > 0) MOE_CUDA_CHECK(cudaMemcpyAsync(b.data(), host, n * sizeof(T), cudaMemcpyHostToDevice, ctx.stream()));
  return b;
}

// Device → host on the context's stream; the data is there after ctx.synchronize().
template <typename T>
void unstage(const DeviceContext& ctx, const DeviceBuffer<T>& b, T* host) {
  if (b.size() > 0)
    MOE_CUDA_CHECK(cudaMemcpyAsync(host, b.data(), b.size() * sizeof(T), cudaMemcpyDeviceToHost, ctx.stream()));
}

// Per-expert matrices back to back: the [L, rows, cols] layout of DeviceExperts.
template <typename T>
std::vector<T> concatenated(const std::vector<Matrix<T>>& parts) {
  std::vector<T> flat;
  for (const auto& m : parts) flat.insert(flat.end(), m.data(), m.data() + m.size());
  return flat;
}

template <typename T>
void split_into(const std::vector<T>& flat, std::vector<Matrix<T>>& parts) {
  std::size_t at = 0;
  for (auto& m : parts) {
    std::copy_n(flat.begin() + std::ptrdiff_t(at), m.size(), m.data());
    at += std::size_t(m.size());
  }
}


// The shape rules of kernels::grouped_swiglu_*; returns d (the ETP slice of the expert FFN).
template <typename T>
std::int64_t check_swiglu_shapes(const Matrix<T>& x, const dist::RowIndex& group_sizes,
                                 const kernels::ExpertShards<T>& w, const Vector<T>& probs) {
  const std::size_t L = w.fc1.size();
  if (L == 0 || w.fc2.size() != L || group_sizes.size() != L)
    throw std::invalid_argument("DeviceKernels: grouped SwiGLU needs one fc1, one fc2 and one group size per expert");
  const std::int64_t d = w.fc1[0].rows() / 2;
  for (std::size_t e = 0; e < L; ++e)
    if (w.fc1[e].rows() != 2 * d || w.fc1[e].cols() != x.cols() || w.fc2[e].rows() != x.cols() ||
        w.fc2[e].cols() != d)
      throw std::invalid_argument("DeviceKernels: expert " + std::to_string(e) + " shards are not [2d, w] and [w, d]");
  for (auto n : group_sizes)
    if (n < 0) throw std::invalid_argument("DeviceKernels: negative group size");
  if (std::accumulate(group_sizes.begin(), group_sizes.end(), std::int64_t{0}) != x.rows() || probs.size() != x.rows())
    throw std::invalid_argument("DeviceKernels: group sizes and probabilities must cover the rows of x");
  return d;
}

// GemmOperands::bf16 where it gives the float GEMMs' products exactly: a float step with bf16 storage, the
// probabilities after the activation, the cuBLAS/CUTLASS mode, and every operand given holding bf16 values.
template <typename T>
GemmOperands operands_of(GemmMode mode, const kernels::SwigluOptions& options,
                         std::initializer_list<std::pair<const T*, std::size_t>> operands) {
  if constexpr (std::is_same_v<T, float>) {
    if (mode != GemmMode::cublas || !options.bf16 || options.probs_on_input) return GemmOperands::as_stored;
    for (const auto& [data, n] : operands)
      if (!holds_bf16_values(data, n)) return GemmOperands::as_stored;
    return GemmOperands::bf16;
  } else {
    (void)mode, (void)options, (void)operands;
    return GemmOperands::as_stored;
  }
}

}  // namespace

DeviceKernels::DeviceKernels(int device, GemmMode mode) : device_(device), mode_(mode) {
  const int visible = visible_device_count();
  if (device < 0 || device >= visible)
    throw std::runtime_error("DeviceKernels: no CUDA device " + std::to_string(device) + " (" +
                             std::to_string(visible) + " visible)");
}

std::string_view DeviceKernels::name() const {
  return mode_ == GemmMode::cublas ? "cuda" : "cuda (batch-invariant GEMM)";
}

const DeviceContext& DeviceKernels::context() const {
  thread_local std::map<std::pair<int, GemmMode>, std::unique_ptr<DeviceContext>> contexts;
  MOE_CUDA_CHECK(cudaSetDevice(device_));
  auto& ctx = contexts[{device_, mode_}];
  if (!ctx) ctx = std::make_unique<DeviceContext>(mode_);
  return *ctx;
}

template <typename T>
Matrix<T> DeviceKernels::gather(const Matrix<T>& x, const dist::RowIndex& rows) const {
  Matrix<T> out(static_cast<Eigen::Index>(rows.size()), x.cols());
  for (auto r : rows)
    if (r < 0 || r >= x.rows())
      throw std::out_of_range("DeviceKernels::gather_rows: row " + std::to_string(r) + " outside [0, " +
                              std::to_string(x.rows()) + ")");
  if (out.size() == 0) return out;
  ++device_calls_;
  const DeviceContext& ctx = context();
  const auto index = narrow_rows(rows);
  const auto d_x = stage(ctx, x.data(), std::size_t(x.size()));
  const auto d_index = stage(ctx, index.data(), index.size());
  DeviceBuffer<T> d_out(std::size_t(out.size()), ctx.stream());
  moe::cuda::gather_rows(ctx.stream(), d_x.data(), sizeof(T) * std::size_t(x.cols()), d_index.data(),
                         std::int64_t(rows.size()), 1, d_out.data());
  unstage(ctx, d_out, out.data());
  ctx.synchronize();
  return out;
}

template <typename T>
Matrix<T> DeviceKernels::scatter_add(const Matrix<T>& y, const dist::RowIndex& rows, Eigen::Index out_rows) const {
  if (static_cast<Eigen::Index>(rows.size()) != y.rows())
    throw std::invalid_argument("DeviceKernels::scatter_add_rows: one target row per input row");
  Matrix<T> out = Matrix<T>::Zero(out_rows, y.cols());
  if (y.size() == 0) return out;
  const ScatterPlan plan = make_scatter_plan(rows, out_rows);  // validates the targets
  ++device_calls_;
  const DeviceContext& ctx = context();
  const auto d_y = stage(ctx, y.data(), std::size_t(y.size()));
  const auto d_offsets = stage(ctx, plan.offsets.data(), plan.offsets.size());
  const auto d_sources = stage(ctx, plan.sources.data(), plan.sources.size());
  DeviceBuffer<T> d_out(std::size_t(out.size()), ctx.stream());
  d_out.zero(ctx.stream());
  moe::cuda::scatter_add_rows<T>(ctx.stream(), d_y.data(), y.cols(), d_offsets.data(), d_sources.data(), nullptr,
                                 out_rows, d_out.data());
  unstage(ctx, d_out, out.data());
  ctx.synchronize();
  return out;
}

template <typename T>
kernels::GroupedSwigluForward<T> DeviceKernels::swiglu_forward(const Matrix<T>& x, const dist::RowIndex& group_sizes,
                                                               const kernels::ExpertShards<T>& w,
                                                               const Vector<T>& probs,
                                                               const kernels::SwigluOptions& options) const {
  const std::int64_t d = check_swiglu_shapes(x, group_sizes, w, probs);
  kernels::GroupedSwigluForward<T> out{Matrix<T>::Zero(x.rows(), x.cols()), Matrix<T>::Zero(x.rows(), 2 * d)};
  if (x.size() == 0) return out;
  ++device_calls_;
  const DeviceContext& ctx = context();
  const auto fc1 = concatenated(w.fc1), fc2 = concatenated(w.fc2);
  const auto d_x = stage(ctx, x.data(), std::size_t(x.size()));
  const auto d_probs = stage(ctx, probs.data(), std::size_t(probs.size()));
  const auto d_fc1 = stage(ctx, fc1.data(), fc1.size()), d_fc2 = stage(ctx, fc2.data(), fc2.size());
  DeviceBuffer<T> d_pre(std::size_t(out.pre.size()), ctx.stream()), d_y(std::size_t(out.y.size()), ctx.stream());
  const DeviceExperts<T> experts{d_fc1.data(), d_fc2.data(), x.cols(), d};
  const GemmOperands operands = operands_of<T>(
      mode_, options, {{x.data(), std::size_t(x.size())}, {fc1.data(), fc1.size()}, {fc2.data(), fc2.size()}});
  const std::int64_t fallbacks = ctx.grouped_fallbacks();
  moe::cuda::grouped_swiglu_forward<T>(ctx, d_x.data(), group_sizes, experts, d_probs.data(), options,
                                       d_pre.data(), d_y.data(), operands);
  bf16_operand_calls_ += operands == GemmOperands::bf16;
  grouped_fallbacks_ += ctx.grouped_fallbacks() - fallbacks;
  unstage(ctx, d_pre, out.pre.data());
  unstage(ctx, d_y, out.y.data());
  ctx.synchronize();
  return out;
}

template <typename T>
kernels::GroupedSwigluBackward<T> DeviceKernels::swiglu_backward(
    const Matrix<T>& x, const dist::RowIndex& group_sizes, const kernels::ExpertShards<T>& w, const Vector<T>& probs,
    const kernels::SwigluOptions& options, const Matrix<T>& pre, const Matrix<T>& dy,
    kernels::ExpertShards<T>& grads) const {
  const std::int64_t d = check_swiglu_shapes(x, group_sizes, w, probs);
  if (pre.rows() != x.rows() || pre.cols() != 2 * d || dy.rows() != x.rows() || dy.cols() != x.cols() ||
      grads.fc1.size() != w.fc1.size() || grads.fc2.size() != w.fc2.size())
    throw std::invalid_argument("DeviceKernels: grouped SwiGLU backward operands do not match the forward");
  kernels::GroupedSwigluBackward<T> out{Matrix<T>::Zero(x.rows(), x.cols()), Vector<T>::Zero(x.rows())};
  if (x.size() == 0) return out;
  ++device_calls_;
  const DeviceContext& ctx = context();
  const auto fc1 = concatenated(w.fc1), fc2 = concatenated(w.fc2);
  auto g1 = concatenated(grads.fc1), g2 = concatenated(grads.fc2);
  const auto d_x = stage(ctx, x.data(), std::size_t(x.size()));
  const auto d_probs = stage(ctx, probs.data(), std::size_t(probs.size()));
  const auto d_pre = stage(ctx, pre.data(), std::size_t(pre.size()));
  const auto d_dy = stage(ctx, dy.data(), std::size_t(dy.size()));
  const auto d_fc1 = stage(ctx, fc1.data(), fc1.size()), d_fc2 = stage(ctx, fc2.data(), fc2.size());
  auto d_g1 = stage(ctx, g1.data(), g1.size()), d_g2 = stage(ctx, g2.data(), g2.size());
  DeviceBuffer<T> d_dx(std::size_t(out.dx.size()), ctx.stream()), d_dprob(std::size_t(out.dprob.size()), ctx.stream());
  const DeviceExperts<T> experts{d_fc1.data(), d_fc2.data(), x.cols(), d};
  const GemmOperands operands = operands_of<T>(mode_, options,
                                               {{x.data(), std::size_t(x.size())},
                                                {dy.data(), std::size_t(dy.size())},
                                                {fc1.data(), fc1.size()},
                                                {fc2.data(), fc2.size()}});
  const std::int64_t fallbacks = ctx.grouped_fallbacks();
  moe::cuda::grouped_swiglu_backward<T>(ctx, d_x.data(), group_sizes, experts, d_probs.data(), options,
                                        d_pre.data(), d_dy.data(), d_dx.data(), d_dprob.data(), d_g1.data(),
                                        d_g2.data(), operands);
  bf16_operand_calls_ += operands == GemmOperands::bf16;
  grouped_fallbacks_ += ctx.grouped_fallbacks() - fallbacks;
  unstage(ctx, d_dx, out.dx.data());
  unstage(ctx, d_dprob, out.dprob.data());
  unstage(ctx, d_g1, g1.data());
  unstage(ctx, d_g2, g2.data());
  ctx.synchronize();
  split_into(g1, grads.fc1);
  split_into(g2, grads.fc2);
  return out;
}

// KernelBackendOf (inline, in every user's translation unit) calls these; they are defined only here.
#define MOE_INSTANTIATE_DEVICE_KERNELS(T)                                                                           \
  template Matrix<T> DeviceKernels::gather<T>(const Matrix<T>&, const dist::RowIndex&) const;                      \
  template Matrix<T> DeviceKernels::scatter_add<T>(const Matrix<T>&, const dist::RowIndex&, Eigen::Index) const;    \
  template kernels::GroupedSwigluForward<T> DeviceKernels::swiglu_forward<T>(                                      \
      const Matrix<T>&, const dist::RowIndex&, const kernels::ExpertShards<T>&, const Vector<T>&,                  \
      const kernels::SwigluOptions&) const;                                                                        \
  template kernels::GroupedSwigluBackward<T> DeviceKernels::swiglu_backward<T>(                                    \
      const Matrix<T>&, const dist::RowIndex&, const kernels::ExpertShards<T>&, const Vector<T>&,                  \
      const kernels::SwigluOptions&, const Matrix<T>&, const Matrix<T>&, kernels::ExpertShards<T>&) const;
MOE_INSTANTIATE_DEVICE_KERNELS(double)
MOE_INSTANTIATE_DEVICE_KERNELS(float)

}  // namespace moe::cuda
