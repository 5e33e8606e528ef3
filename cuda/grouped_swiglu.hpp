// Grouped SwiGLU over a rank's local experts on device: the counterpart of distributed/kernels/grouped_swiglu.hpp,
// same math and options (kernels::SwigluOptions: clamp, probs on the input): grouped GEMMs (grouped_gemm in gemm.hpp;
// two forward, four backward, over the non-empty groups, run as the context's GroupedGemm says) and the elementwise
// parts in swiglu_kernels.cu.
//
// Shapes (row-major, device): x [rows, w] grouped by local expert (group_sizes on the host: the split sizes are
// host control, as in Megatron's grouped GEMM); probs [rows] in Acc<T>; pre [rows, 2d] saved for the backward;
// y, dy, dx [rows, w]; dprob [rows]. Expert weights contiguous per local expert: fc1 [L, 2d, w] with rows
// [gate slice; up slice], fc2 [L, w, d], the ETP shard layout of ExpertShards.
// Workspace comes from the stream-ordered pool; functions enqueue on ctx.stream() and return.
//
// GemmOperands::bf16 (float data with options.bf16, the probabilities after the activation): every GEMM operand
// then holds bf16 values (x, dy and the weights as the caller promises; pre, h, act and g_pre rounded at their
// storage points), so each is copied once into bf16 (exactly) and the six GEMMs run on bf16 operands with fp32
// accumulation and float results (grouped_gemm_bf16_operands): the products are exact in fp32, so only the order of
// the sums can differ from the float GEMMs'. This is what lets `check --kernels cuda --dtype bf16` run the bf16
// grouped kernel the benchmark times.
#pragma once

#include "cuda/device_context.hpp"
#include "cuda/element.hpp"
#include "distributed/kernels/grouped_swiglu.hpp"

#include <cstdint>
#include <span>

namespace moe::cuda {

template <typename T>
struct DeviceExperts {
  const T* fc1 = nullptr;
  const T* fc2 = nullptr;
  std::int64_t width = 0;  // w
  std::int64_t ffn = 0;    // d (this rank's ETP slice)
};

enum class GemmOperands { as_stored, bf16 };

template <typename T>
void grouped_swiglu_forward(const DeviceContext& ctx, const T* x, std::span<const std::int64_t> group_sizes,
                            const DeviceExperts<T>& experts, const Acc<T>* probs,
                            const kernels::SwigluOptions& options, T* pre, T* y,
                            GemmOperands operands = GemmOperands::as_stored);

// Writes dx and dprob, accumulates into grad_fc1 [L, 2d, w] and grad_fc2 [L, w, d].
template <typename T>
void grouped_swiglu_backward(const DeviceContext& ctx, const T* x, std::span<const std::int64_t> group_sizes,
                             const DeviceExperts<T>& experts, const Acc<T>* probs,
                             const kernels::SwigluOptions& options, const T* pre, const T* dy, T* dx, Acc<T>* dprob,
                             T* grad_fc1, T* grad_fc2, GemmOperands operands = GemmOperands::as_stored);

}  // namespace moe::cuda
