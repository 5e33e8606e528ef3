#include "cuda/grouped_swiglu.hpp"

#include "cuda/device_buffer.hpp"
#include "cuda/grouped_gemm.hpp"
#include "cuda/swiglu_kernels.hpp"

#include <numeric>
#include <stdexcept>
#include <vector>

namespace moe::cuda {
namespace {

std::int64_t total_rows(std::span<const std::int64_t> group_sizes) {
  for (auto n : group_sizes)
    if (n < 0) throw std::invalid_argument("grouped SwiGLU: group sizes must be >= 0");
  return std::accumulate(group_sizes.begin(), group_sizes.end(), std::int64_t{0});
}

SwigluClamp clamp_of(const kernels::SwigluOptions& o) {
  return {o.clamp.has_value(), o.clamp.value_or(0.0), o.clamp_limit_passes};
}

// A bf16 storage point (options.bf16, the model's bf16_storage): the same points as the CPU kernels round at
// (distributed/kernels/grouped_swiglu.cpp): pre and h forward; g_h, the activation the fc2 gradient takes and
// g_pre backward.
template <typename T>
void stored(cudaStream_t s, const kernels::SwigluOptions& options, T* data, std::int64_t count) {
  if (options.bf16) round_to_bf16<T>(s, data, count);
}

// One grouped GEMM over the non-empty groups: problem(e, begin, n) gives expert e's GEMM for its n rows from row
// `begin`, in expert order.
template <typename T, typename Problem>
void grouped(const DeviceContext& ctx, Op op_a, Op op_b, std::span<const std::int64_t> sizes, int beta,
             Problem&& problem) {
  std::vector<GemmProblem<T>> problems;
  std::int64_t begin = 0;
  for (std::size_t e = 0; e < sizes.size(); begin += sizes[e], ++e)
    if (sizes[e] > 0) problems.push_back(problem(std::int64_t(e), begin, sizes[e]));
  grouped_gemm<T>(ctx, op_a, op_b, problems, beta);
}

// What fc1 multiplies: x, or p ⊙ x (written into `storage`) when the probabilities go on the input.
template <typename T>
const T* fc1_input(cudaStream_t s, std::int64_t rows, std::int64_t w, const T* x, const Acc<T>* probs,
                   const kernels::SwigluOptions& options, DeviceBuffer<T>& storage) {
  if (!options.probs_on_input) return x;
  storage = DeviceBuffer<T>(std::size_t(rows * w), s);
  scale_rows<T>(s, rows, w, x, probs, storage.data());
  return storage.data();
}

}  // namespace

template <typename T>
void grouped_swiglu_forward(const DeviceContext& ctx, const T* x, std::span<const std::int64_t> group_sizes,
                            const DeviceExperts<T>& ex, const Acc<T>* probs, const kernels::SwigluOptions& options,
                            T* pre, T* y) {
  const std::int64_t rows = total_rows(group_sizes), w = ex.width, d = ex.ffn;
  const cudaStream_t s = ctx.stream();
  DeviceBuffer<T> scaled_x;
  const T* in = fc1_input(s, rows, w, x, probs, options, scaled_x);
  // pre_e [n, 2d] = in_e · fc1_eᵀ
  grouped<T>(ctx, Op::n, Op::t, group_sizes, 0, [&](std::int64_t e, std::int64_t begin, std::int64_t n) {
    return GemmProblem<T>{n, 2 * d, w, in + begin * w, w, ex.fc1 + e * 2 * d * w, w, pre + begin * 2 * d, 2 * d};
  });
  stored(s, options, pre, rows * 2 * d);
  DeviceBuffer<T> h(std::size_t(rows * d), s);
  swiglu_activation<T>(s, rows, d, pre, options.probs_on_input ? nullptr : probs, clamp_of(options), h.data());
  stored(s, options, h.data(), rows * d);
  // y_e [n, w] = h_e · fc2_eᵀ
  grouped<T>(ctx, Op::n, Op::t, group_sizes, 0, [&](std::int64_t e, std::int64_t begin, std::int64_t n) {
    return GemmProblem<T>{n, w, d, h.data() + begin * d, d, ex.fc2 + e * w * d, d, y + begin * w, w};
  });
}

template <typename T>
void grouped_swiglu_backward(const DeviceContext& ctx, const T* x, std::span<const std::int64_t> group_sizes,
                             const DeviceExperts<T>& ex, const Acc<T>* probs, const kernels::SwigluOptions& options,
                             const T* pre, const T* dy, T* dx, Acc<T>* dprob, T* grad_fc1, T* grad_fc2) {
  const std::int64_t rows = total_rows(group_sizes), w = ex.width, d = ex.ffn;
  const cudaStream_t s = ctx.stream();
  const bool on_input = options.probs_on_input;
  DeviceBuffer<T> g_h(std::size_t(rows * d), s), g_pre(std::size_t(rows * 2 * d), s), act(std::size_t(rows * d), s);
  DeviceBuffer<T> scaled_x;
  const T* in = fc1_input(s, rows, w, x, probs, options, scaled_x);
  // g_h_e [n, d] = dy_e · fc2_e
  grouped<T>(ctx, Op::n, Op::n, group_sizes, 0, [&](std::int64_t e, std::int64_t begin, std::int64_t n) {
    return GemmProblem<T>{n, d, w, dy + begin * w, w, ex.fc2 + e * w * d, d, g_h.data() + begin * d, d};
  });
  stored(s, options, g_h.data(), rows * d);
  swiglu_activation_backward<T>(s, rows, d, pre, on_input ? nullptr : probs, clamp_of(options), g_h.data(),
                                g_pre.data(), act.data(), on_input ? nullptr : dprob);
  stored(s, options, act.data(), rows * d);
  stored(s, options, g_pre.data(), rows * 2 * d);
  // grad_fc2_e [w, d] += dy_eᵀ · act_e
  grouped<T>(ctx, Op::t, Op::n, group_sizes, 1, [&](std::int64_t e, std::int64_t begin, std::int64_t n) {
    return GemmProblem<T>{w, d, n, dy + begin * w, w, act.data() + begin * d, d, grad_fc2 + e * w * d, d};
  });
  // g_in_e [n, w] = g_pre_e · fc1_e
  grouped<T>(ctx, Op::n, Op::n, group_sizes, 0, [&](std::int64_t e, std::int64_t begin, std::int64_t n) {
    return GemmProblem<T>{n, w, 2 * d, g_pre.data() + begin * 2 * d, 2 * d, ex.fc1 + e * 2 * d * w, w, dx + begin * w,
                          w};
  });
  // grad_fc1_e [2d, w] += g_pre_eᵀ · in_e
  grouped<T>(ctx, Op::t, Op::n, group_sizes, 1, [&](std::int64_t e, std::int64_t begin, std::int64_t n) {
    return GemmProblem<T>{2 * d, w, n, g_pre.data() + begin * 2 * d, 2 * d, in + begin * w, w, grad_fc1 + e * 2 * d * w,
                          w};
  });
  if (on_input) {
    // The probability scaled the input: dprob = ⟨g_in, x⟩, dx = p ⊙ g_in (dx holds g_in until here).
    row_dot<T>(s, rows, w, dx, x, dprob);
    scale_rows<T>(s, rows, w, dx, probs, dx);
  }
}

#define MOE_INSTANTIATE_DEVICE_SWIGLU(T)                                                                           \
  template void grouped_swiglu_forward<T>(const DeviceContext&, const T*, std::span<const std::int64_t>,          \
                                          const DeviceExperts<T>&, const Acc<T>*, const kernels::SwigluOptions&,   \
                                          T*, T*);                                                                 \
  template void grouped_swiglu_backward<T>(const DeviceContext&, const T*, std::span<const std::int64_t>,         \
                                           const DeviceExperts<T>&, const Acc<T>*, const kernels::SwigluOptions&,  \
                                           const T*, const T*, T*, Acc<T>*, T*, T*);
MOE_INSTANTIATE_DEVICE_SWIGLU(double)
MOE_INSTANTIATE_DEVICE_SWIGLU(float)
MOE_INSTANTIATE_DEVICE_SWIGLU(bf16)

}  // namespace moe::cuda
