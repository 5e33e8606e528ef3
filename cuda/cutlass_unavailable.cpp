// Built instead of cutlass_grouped_gemm.cu where CMake found no CUTLASS (or builds for another architecture than
// sm_90): the grouped GEMM's cutlass mode finds the kernel missing and runs on lanes (device_context.hpp).
#include "cuda/cutlass_grouped_gemm.hpp"

namespace moe::cuda {

bool cutlass_grouped_available() { return false; }

bool cutlass_grouped_gemm(cudaStream_t, Op, Op, const GemmProblem<bf16>*, std::size_t, int) { return false; }
bool cutlass_grouped_gemm(cudaStream_t, Op, Op, const GemmProblem<bf16, float>*, std::size_t, int) { return false; }

}  // namespace moe::cuda
