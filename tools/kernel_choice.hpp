// `--kernels NAME`: which dist::KernelBackend does the data work (row moves, grouped SwiGLU) of the parallel
// system in `moe-oracle check`:
//   cpu                    Eigen + OpenMP (distributed/kernels/cpu_kernels.cpp), the default;
//   cuda                   the CUDA kernels with cuBLAS GEMMs on GPU 0 (cuda/device_kernels.hpp);
//   cuda-batch-invariant   the same with the fixed-order GEMM (a token's result ignores the rest of the batch).
// The CUDA names need a build with the CUDA backend and a visible GPU; otherwise an error says which is missing.
#pragma once

#include "distributed/kernels/kernel_backend.hpp"

#include <memory>
#include <string>

namespace moe::cli {

class KernelChoice {
 public:
  explicit KernelChoice(const std::string& name);  // throws std::invalid_argument / std::runtime_error
  const dist::KernelBackend& backend() const { return owned_ ? *owned_ : dist::cpu_kernels(); }

 private:
  std::unique_ptr<const dist::KernelBackend> owned_;
};

inline constexpr const char* kKernelNames = "cpu, cuda, cuda-batch-invariant";

}  // namespace moe::cli
