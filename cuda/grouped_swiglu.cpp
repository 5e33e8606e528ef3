#include "cuda/grouped_swiglu.hpp"

#include "cuda/device_buffer.hpp"
#include "cuda/grouped_gemm.hpp"
#include "cuda/swiglu_kernels.hpp"
#include "cuda/token_kernels.hpp"

#include <numeric>
#include <optional>
#include <stdexcept>
#include <type_traits>
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

// GemmOperands::bf16: bf16 copies of the float buffers the GEMMs read (made once each, exact as their values are
// bf16), found again from a float pointer into the original.
class Bf16Operands {
 public:
  explicit Bf16Operands(cudaStream_t stream) : stream_(stream) {}
  template <typename T>
  void add(const T* data, std::int64_t count) {
    if constexpr (std::is_same_v<T, float>) {
      copies_.push_back({data, count, DeviceBuffer<bf16>(std::size_t(count), stream_)});
      convert<float, bf16>(stream_, data, copies_.back().bf16s.data(), count);
    } else {
      throw std::logic_error("grouped SwiGLU: bf16 copies are of float data");
    }
  }
  GemmProblem<bf16, float> of(const GemmProblem<float>& p) const {
    return {p.m, p.n, p.k, at(p.a), p.lda, at(p.b), p.ldb, p.c, p.ldc};
  }

 private:
  struct Copy {
    const float* data;
    std::int64_t count;
    DeviceBuffer<bf16> bf16s;
  };
  const bf16* at(const float* p) const {
    for (const Copy& c : copies_)
      if (p >= c.data && p < c.data + c.count) return c.bf16s.data() + (p - c.data);
    throw std::logic_error("grouped SwiGLU on bf16 operands: a GEMM reads a buffer that has no bf16 copy");
  }
  cudaStream_t stream_;
  std::vector<Copy> copies_;
};

// One grouped GEMM over the non-empty groups: problem(e, begin, n) gives expert e's GEMM for its n rows from row
// `begin`, in expert order; on the bf16 copies of its operands when `bf16_copies` is given (float data only).
template <typename T, typename Problem>
void grouped(const DeviceContext& ctx, Op op_a, Op op_b, std::span<const std::int64_t> sizes, int beta,
             Problem&& problem, const Bf16Operands* bf16_copies = nullptr) {
  std::vector<GemmProblem<T>> problems;
  std::int64_t begin = 0;
  for (std::size_t e = 0; e < sizes.size(); begin += sizes[e], ++e)
    if (sizes[e] > 0) problems.push_back(problem(std::int64_t(e), begin, sizes[e]));
  if constexpr (std::is_same_v<T, float>) {
    if (bf16_copies != nullptr) {
      std::vector<GemmProblem<bf16, float>> narrow;
      for (const auto& p : problems) narrow.push_back(bf16_copies->of(p));
      grouped_gemm_bf16_operands(ctx, op_a, op_b, narrow, beta);
      return;
    }
  }
  grouped_gemm<T>(ctx, op_a, op_b, problems, beta);
}

// GemmOperands::bf16: the bf16 copies of x and the weights to start from (none for as_stored). Refused where the
// operands would not all hold bf16 values.
template <typename T>
std::optional<Bf16Operands> bf16_operands(const DeviceContext& ctx, GemmOperands operands,
                                          const kernels::SwigluOptions& options, const T* x, std::int64_t rows,
                                          const DeviceExperts<T>& ex, std::size_t experts) {
  if (operands == GemmOperands::as_stored) return std::nullopt;
  if (!std::is_same_v<T, float> || !options.bf16 || options.probs_on_input)
    throw std::invalid_argument("grouped SwiGLU: bf16 GEMM operands need float data with bf16 storage and the "
                                "probabilities after the activation (p·x, the input with them, is not rounded)");
  std::optional<Bf16Operands> narrow(std::in_place, ctx.stream());
  const auto e = std::int64_t(experts);
  narrow->add(x, rows * ex.width);
  narrow->add(ex.fc1, e * 2 * ex.ffn * ex.width);
  narrow->add(ex.fc2, e * ex.width * ex.ffn);
  return narrow;
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
                            T* pre, T* y, GemmOperands operands) {
  const std::int64_t rows = total_rows(group_sizes), w = ex.width, d = ex.ffn;
  const cudaStream_t s = ctx.stream();
  DeviceBuffer<T> scaled_x;
  const T* in = fc1_input(s, rows, w, x, probs, options, scaled_x);
  auto narrow = bf16_operands(ctx, operands, options, x, rows, ex, group_sizes.size());
  const Bf16Operands* bf16s = narrow ? &*narrow : nullptr;
  // pre_e [n, 2d] = in_e · fc1_eᵀ
  grouped<T>(ctx, Op::n, Op::t, group_sizes, 0, [&](std::int64_t e, std::int64_t begin, std::int64_t n) {
    return GemmProblem<T>{n, 2 * d, w, in + begin * w, w, ex.fc1 + e * 2 * d * w, w, pre + begin * 2 * d, 2 * d};
  }, bf16s);
  stored(s, options, pre, rows * 2 * d);
  DeviceBuffer<T> h(std::size_t(rows * d), s);
  swiglu_activation<T>(s, rows, d, pre, options.probs_on_input ? nullptr : probs, clamp_of(options), h.data());
  stored(s, options, h.data(), rows * d);
  if (narrow) narrow->add(h.data(), rows * d);
  // y_e [n, w] = h_e · fc2_eᵀ
  grouped<T>(ctx, Op::n, Op::t, group_sizes, 0, [&](std::int64_t e, std::int64_t begin, std::int64_t n) {
    return GemmProblem<T>{n, w, d, h.data() + begin * d, d, ex.fc2 + e * w * d, d, y + begin * w, w};
  }, bf16s);
}

template <typename T>
void grouped_swiglu_backward(const DeviceContext& ctx, const T* x, std::span<const std::int64_t> group_sizes,
                             const DeviceExperts<T>& ex, const Acc<T>* probs, const kernels::SwigluOptions& options,
                             const T* pre, const T* dy, T* dx, Acc<T>* dprob, T* grad_fc1, T* grad_fc2,
                             GemmOperands operands) {
  const std::int64_t rows = total_rows(group_sizes), w = ex.width, d = ex.ffn;
  const cudaStream_t s = ctx.stream();
  const bool on_input = options.probs_on_input;
  DeviceBuffer<T> g_h(std::size_t(rows * d), s), g_pre(std::size_t(rows * 2 * d), s), act(std::size_t(rows * d), s);
  DeviceBuffer<T> scaled_x;
  const T* in = fc1_input(s, rows, w, x, probs, options, scaled_x);
  auto narrow = bf16_operands(ctx, operands, options, x, rows, ex, group_sizes.size());
  const Bf16Operands* bf16s = narrow ? &*narrow : nullptr;
  if (narrow) narrow->add(dy, rows * w);
  // g_h_e [n, d] = dy_e · fc2_e
  grouped<T>(ctx, Op::n, Op::n, group_sizes, 0, [&](std::int64_t e, std::int64_t begin, std::int64_t n) {
    return GemmProblem<T>{n, d, w, dy + begin * w, w, ex.fc2 + e * w * d, d, g_h.data() + begin * d, d};
  }, bf16s);
  stored(s, options, g_h.data(), rows * d);
  swiglu_activation_backward<T>(s, rows, d, pre, on_input ? nullptr : probs, clamp_of(options), g_h.data(),
                                g_pre.data(), act.data(), on_input ? nullptr : dprob);
  stored(s, options, act.data(), rows * d);
  stored(s, options, g_pre.data(), rows * 2 * d);
  if (narrow) {
    narrow->add(act.data(), rows * d);
    narrow->add(g_pre.data(), rows * 2 * d);
  }
  // grad_fc2_e [w, d] += dy_eᵀ · act_e
  grouped<T>(ctx, Op::t, Op::n, group_sizes, 1, [&](std::int64_t e, std::int64_t begin, std::int64_t n) {
    return GemmProblem<T>{w, d, n, dy + begin * w, w, act.data() + begin * d, d, grad_fc2 + e * w * d, d};
  }, bf16s);
  // g_in_e [n, w] = g_pre_e · fc1_e
  grouped<T>(ctx, Op::n, Op::n, group_sizes, 0, [&](std::int64_t e, std::int64_t begin, std::int64_t n) {
    return GemmProblem<T>{n, w, 2 * d, g_pre.data() + begin * 2 * d, 2 * d, ex.fc1 + e * 2 * d * w, w, dx + begin * w,
                          w};
  }, bf16s);
  // grad_fc1_e [2d, w] += g_pre_eᵀ · in_e
  grouped<T>(ctx, Op::t, Op::n, group_sizes, 1, [&](std::int64_t e, std::int64_t begin, std::int64_t n) {
    return GemmProblem<T>{2 * d, w, n, g_pre.data() + begin * 2 * d, 2 * d, in + begin * w, w, grad_fc1 + e * 2 * d * w,
                          w};
  }, bf16s);
  if (on_input) {
    // The probability scaled the input: dprob = ⟨g_in, x⟩, dx = p ⊙ g_in (dx holds g_in until here).
    row_dot<T>(s, rows, w, dx, x, dprob);
    scale_rows<T>(s, rows, w, dx, probs, dx);
  }
}

#define MOE_INSTANTIATE_DEVICE_SWIGLU(T)                                                                           \
  template void grouped_swiglu_forward<T>(const DeviceContext&, const T*, std::span<const std::int64_t>,          \
                                          const DeviceExperts<T>&, const Acc<T>*, const kernels::SwigluOptions&,   \
                                          T*, T*, GemmOperands);                                                   \
  template void grouped_swiglu_backward<T>(const DeviceContext&, const T*, std::span<const std::int64_t>,         \
                                           const DeviceExperts<T>&, const Acc<T>*, const kernels::SwigluOptions&,  \
                                           const T*, const T*, T*, Acc<T>*, T*, T*, GemmOperands);
MOE_INSTANTIATE_DEVICE_SWIGLU(double)
MOE_INSTANTIATE_DEVICE_SWIGLU(float)
MOE_INSTANTIATE_DEVICE_SWIGLU(bf16)

}  // namespace moe::cuda
