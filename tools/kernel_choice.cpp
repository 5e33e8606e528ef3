#include "tools/kernel_choice.hpp"

#include <stdexcept>
#include <string>

#ifdef MOE_ORACLE_HAVE_CUDA
#include "cuda/device_kernels.hpp"
#endif

namespace moe::cli {

KernelChoice::KernelChoice(Kernels kernels) {
  if (kernels == Kernels::cpu) return;
  const std::string flag = "--kernels " + std::string(name_of(kernels));
#ifdef MOE_ORACLE_HAVE_CUDA
  try {
    owned_ = std::make_unique<cuda::DeviceKernels>(
        0, kernels == Kernels::cuda ? cuda::GemmMode::cublas : cuda::GemmMode::batch_invariant);
  } catch (const std::runtime_error& e) {
    throw std::invalid_argument(flag + ": " + e.what());
  }
#else
  throw std::invalid_argument(flag + ": this build has no CUDA backend (nvcc was not found when CMake configured it)");
#endif
}

}  // namespace moe::cli
