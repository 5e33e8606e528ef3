// Kernels of swiglu_kernels.hpp: a grid-stride loop over elements for the forward and the row scaling, one warp
// per row where a row is reduced (backward, row_dot).
#include "cuda/cuda_error.hpp"
#include "cuda/device_math.cuh"
#include "cuda/swiglu_kernels.hpp"

#include <math_constants.h>

#include <type_traits>

namespace moe::cuda {
namespace {

constexpr int block_threads = 256;
constexpr int rows_per_block = block_threads / 32;

template <typename A>
struct Activation {
  A gate, up, sig, silu;
  bool gate_pass, up_pass;
};

template <typename A>
__device__ Activation<A> activate(A gate, A up, SwigluClamp clamp) {
  Activation<A> a{gate, up, 0, 0, true, true};
  if (clamp.enabled) {
    const A L = A(clamp.limit);
    // Strictly inside: 0 at the limit, unless clamp-limit-passes-gradient (reference/swiglu.hpp).
    a.gate_pass = clamp.limit_passes ? gate <= L : gate < L;
    a.up_pass = clamp.limit_passes ? (up >= -L && up <= L) : (up > -L && up < L);
    a.gate = fmin(gate, L);
    a.up = fmax(fmin(up, L), -L);
  }
  a.sig = A(1) / (A(1) + exp_acc(-a.gate));
  a.silu = a.gate * a.sig;
  return a;
}

template <typename D, typename A>
__global__ void swiglu_forward_kernel(std::int64_t rows, std::int64_t d, const D* pre, const A* probs,
                                      SwigluClamp clamp, D* h) {
  const std::int64_t total = rows * d;
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / d, c = i % d;
    const Activation<A> a = activate(load_acc(pre + r * 2 * d + c), load_acc(pre + r * 2 * d + d + c), clamp);
    const A act = a.silu * a.up;
    store_acc(h + i, probs != nullptr ? act * probs[r] : act);
  }
}

template <typename D, typename A>
__global__ void swiglu_backward_kernel(std::int64_t rows, std::int64_t d, const D* pre, const A* probs,
                                       SwigluClamp clamp, const D* g_h, D* g_pre, D* act_scaled, A* dprob) {
  const std::int64_t r = std::int64_t(blockIdx.x) * rows_per_block + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  const A p = probs != nullptr ? probs[r] : A(1);
  A dot = 0;
  for (std::int64_t c = lane; c < d; c += 32) {
    const Activation<A> a = activate(load_acc(pre + r * 2 * d + c), load_acc(pre + r * 2 * d + d + c), clamp);
    const A act = a.silu * a.up;
    const A gh = load_acc(g_h + r * d + c);
    dot += act * gh;
    const A g_act = gh * p;
    // silu'(g) = σ(g)·(1 + g·(1 − σ(g))); clamped entries pass no gradient.
    const A dsilu = a.sig * (A(1) + a.gate * (A(1) - a.sig));
    store_acc(g_pre + r * 2 * d + c, a.gate_pass ? g_act * a.up * dsilu : A(0));
    store_acc(g_pre + r * 2 * d + d + c, a.up_pass ? g_act * a.silu : A(0));
    store_acc(act_scaled + r * d + c, act * p);
  }
  dot = warp_sum(dot);
  if (dprob != nullptr && lane == 0) dprob[r] = dot;
}

template <typename D, typename A>
__global__ void scale_rows_kernel(std::int64_t rows, std::int64_t width, const D* x, const A* p, D* out) {
  const std::int64_t total = rows * width;
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += std::int64_t(gridDim.x) * blockDim.x)
    store_acc(out + i, p[i / width] * load_acc(x + i));
}

template <typename D, typename A>
__global__ void row_dot_kernel(std::int64_t rows, std::int64_t width, const D* a, const D* b, A* out) {
  const std::int64_t r = std::int64_t(blockIdx.x) * rows_per_block + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  A dot = 0;
  for (std::int64_t c = lane; c < width; c += 32) dot += load_acc(a + r * width + c) * load_acc(b + r * width + c);
  dot = warp_sum(dot);
  if (lane == 0) out[r] = dot;
}

// Enough blocks to fill an H100/H200 several times over; the kernels stride over the rest.
unsigned elementwise_blocks(std::int64_t total) {
  const std::int64_t blocks = (total + block_threads - 1) / block_threads;
  return unsigned(blocks < 132 * 32 ? blocks : 132 * 32);
}
unsigned row_blocks(std::int64_t rows) { return unsigned((rows + rows_per_block - 1) / rows_per_block); }

}  // namespace

template <typename T>
void swiglu_activation(cudaStream_t stream, std::int64_t rows, std::int64_t d, const T* pre, const Acc<T>* probs,
                       SwigluClamp clamp, T* h) {
  if (rows * d == 0) return;
  swiglu_forward_kernel<Dev<T>, Acc<T>><<<elementwise_blocks(rows * d), block_threads, 0, stream>>>(
      rows, d, reinterpret_cast<const Dev<T>*>(pre), probs, clamp, reinterpret_cast<Dev<T>*>(h));
  check_launch("swiglu_forward_kernel");
}

template <typename T>
void swiglu_activation_backward(cudaStream_t stream, std::int64_t rows, std::int64_t d, const T* pre,
                                const Acc<T>* probs, SwigluClamp clamp, const T* g_h, T* g_pre, T* act_scaled,
                                Acc<T>* dprob) {
  if (rows == 0) return;
  swiglu_backward_kernel<Dev<T>, Acc<T>><<<row_blocks(rows), block_threads, 0, stream>>>(
      rows, d, reinterpret_cast<const Dev<T>*>(pre), probs, clamp, reinterpret_cast<const Dev<T>*>(g_h),
      reinterpret_cast<Dev<T>*>(g_pre), reinterpret_cast<Dev<T>*>(act_scaled), dprob);
  check_launch("swiglu_backward_kernel");
}

template <typename T>
void scale_rows(cudaStream_t stream, std::int64_t rows, std::int64_t width, const T* x, const Acc<T>* p, T* out) {
  if (rows * width == 0) return;
  scale_rows_kernel<Dev<T>, Acc<T>><<<elementwise_blocks(rows * width), block_threads, 0, stream>>>(
      rows, width, reinterpret_cast<const Dev<T>*>(x), p, reinterpret_cast<Dev<T>*>(out));
  check_launch("scale_rows_kernel");
}

template <typename T>
void row_dot(cudaStream_t stream, std::int64_t rows, std::int64_t width, const T* a, const T* b, Acc<T>* out) {
  if (rows == 0) return;
  row_dot_kernel<Dev<T>, Acc<T>><<<row_blocks(rows), block_threads, 0, stream>>>(
      rows, width, reinterpret_cast<const Dev<T>*>(a), reinterpret_cast<const Dev<T>*>(b), out);
  check_launch("row_dot_kernel");
}

namespace {

// round_bf16 of reference/bf16.cpp on the device: in bf16's normal range integer arithmetic on the bits (add just
// under half a quantum plus the lowest kept bit, clear the rest; a carry past 2^127's binade is inf), elsewhere the
// quantum formula (subnormals' quantum 2^-133; zeros, inf and NaN unchanged).
__device__ double round_bf16_device(double x) {
  constexpr int dropped = 52 - 7;
  constexpr unsigned long long min_exponent = 1023 - 126, max_exponent = 1023 + 127;
  const auto bits = static_cast<unsigned long long>(__double_as_longlong(x));
  const unsigned long long exponent = (bits >> 52) & 0x7ff;
  if (exponent < min_exponent || exponent > max_exponent) {
    if (!isfinite(x) || x == 0) return x;
    int e = 0;
    (void)frexp(x, &e);
    const double quantum = ldexp(1.0, max(e, -125) - 8);
    const double r = rint(x / quantum) * quantum;
    return fabs(r) > ldexp(255.0, 120) ? copysign(CUDART_INF, x) : r;
  }
  const unsigned long long lowest_kept = (bits >> dropped) & 1;
  const unsigned long long rounded =
      (bits + ((1ull << (dropped - 1)) - 1) + lowest_kept) & ~((1ull << dropped) - 1);
  if (((rounded >> 52) & 0x7ff) > max_exponent) return copysign(CUDART_INF, x);
  return __longlong_as_double(static_cast<long long>(rounded));
}

__device__ float round_bf16_device(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

template <typename D>
__global__ void round_to_bf16_kernel(D* data, std::int64_t count) {
  const std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) data[i] = round_bf16_device(data[i]);
}

}  // namespace

template <typename T>
void round_to_bf16(cudaStream_t stream, T* data, std::int64_t count) {
  if constexpr (!std::is_same_v<T, bf16>) {
    if (count == 0) return;
    round_to_bf16_kernel<T><<<elementwise_blocks(count), block_threads, 0, stream>>>(data, count);
    check_launch("round_to_bf16_kernel");
  }
}

#define MOE_INSTANTIATE_SWIGLU_KERNELS(T)                                                                          \
  template void swiglu_activation<T>(cudaStream_t, std::int64_t, std::int64_t, const T*, const Acc<T>*,           \
                                     SwigluClamp, T*);                                                             \
  template void swiglu_activation_backward<T>(cudaStream_t, std::int64_t, std::int64_t, const T*, const Acc<T>*, \
                                              SwigluClamp, const T*, T*, T*, Acc<T>*);                             \
  template void scale_rows<T>(cudaStream_t, std::int64_t, std::int64_t, const T*, const Acc<T>*, T*);             \
  template void row_dot<T>(cudaStream_t, std::int64_t, std::int64_t, const T*, const T*, Acc<T>*);              \
  template void round_to_bf16<T>(cudaStream_t, T*, std::int64_t);
MOE_INSTANTIATE_SWIGLU_KERNELS(double)
MOE_INSTANTIATE_SWIGLU_KERNELS(float)
MOE_INSTANTIATE_SWIGLU_KERNELS(bf16)

}  // namespace moe::cuda
