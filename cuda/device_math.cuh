// Device-side views of the element types (element.hpp): the host type bf16 is stored as __nv_bfloat16, and
// loads/stores go through the accumulation type. Arithmetic on the accumulators uses the *_rn intrinsics where
// a kernel promises the CPU's exact result: they are never contracted into FMAs, so a*b+c rounds twice, as the
// CPU code compiled without -mfma does.
#pragma once

#include "cuda/element.hpp"

#include <cuda_bf16.h>

namespace moe::cuda {

template <typename T>
struct DeviceOf {
  using type = T;
};
template <>
struct DeviceOf<bf16> {
  using type = __nv_bfloat16;
};
template <typename T>
using Dev = typename DeviceOf<T>::type;

__device__ inline float load_acc(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ inline float load_acc(const float* p) { return *p; }
__device__ inline double load_acc(const double* p) { return *p; }

__device__ inline void store_acc(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }
__device__ inline void store_acc(float* p, float v) { *p = v; }
__device__ inline void store_acc(double* p, double v) { *p = v; }

__device__ inline float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ inline double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ inline float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ inline double add_rn(double a, double b) { return __dadd_rn(a, b); }

__device__ inline float exp_acc(float x) { return expf(x); }
__device__ inline double exp_acc(double x) { return exp(x); }
__device__ inline float log1p_acc(float x) { return log1pf(x); }
__device__ inline double log1p_acc(double x) { return log1p(x); }
__device__ inline float sqrt_acc(float x) { return sqrtf(x); }
__device__ inline double sqrt_acc(double x) { return sqrt(x); }

// Sum over the 32 lanes of a warp in a fixed butterfly order: every lane gets the same, reproducible result.
template <typename A>
__device__ inline A warp_sum(A v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

}  // namespace moe::cuda
