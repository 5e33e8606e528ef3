// `--kernels NAME`: which dist::KernelBackend does the data work (row moves, grouped SwiGLU) of the parallel
// system in `moe-oracle check`:
//   cpu                    Eigen + OpenMP (distributed/kernels/cpu_kernels.cpp), the default;
//   cuda                   the CUDA kernels with cuBLAS GEMMs on GPU 0 (cuda/device_kernels.hpp);
//   cuda-batch-invariant   the same with the fixed-order GEMM (a token's result ignores the rest of the batch).
// The CUDA names need a build with the CUDA backend and a visible GPU; otherwise an error says which is missing.
#pragma once

#include "distributed/kernels/kernel_backend.hpp"
#include "reference/named.hpp"

#include <memory>
#include <span>

namespace moe::cli {

enum class Kernels { cpu, cuda, cuda_batch_invariant };
inline constexpr Named<Kernels> kKernelNames[] = {
    {Kernels::cpu, "cpu"}, {Kernels::cuda, "cuda"}, {Kernels::cuda_batch_invariant, "cuda-batch-invariant"}};
constexpr std::span<const Named<Kernels>> names_of(Kernels) { return kKernelNames; }

class KernelChoice {
 public:
  explicit KernelChoice(Kernels kernels);  // throws std::invalid_argument where the CUDA backend is missing
  const dist::KernelBackend& backend() const { return owned_ ? *owned_ : dist::cpu_kernels(); }

 private:
  std::unique_ptr<const dist::KernelBackend> owned_;
};

}  // namespace moe::cli
