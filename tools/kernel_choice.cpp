#include "tools/kernel_choice.hpp"

#include <stdexcept>

#ifdef MOE_ORACLE_HAVE_CUDA
#include "cuda/device_kernels.hpp"
#endif

namespace moe::cli {

KernelChoice::KernelChoice(const std::string& name) {
  if (name == "cpu") return;
  if (name != "cuda" && name != "cuda-batch-invariant")
    throw std::invalid_argument("unknown kernels '" + name + "' (" + kKernelNames + ")");
#ifdef MOE_ORACLE_HAVE_CUDA
  try {
    owned_ = std::make_unique<cuda::DeviceKernels>(
        0, name == "cuda" ? cuda::GemmMode::cublas : cuda::GemmMode::batch_invariant);
  } catch (const std::runtime_error& e) {
    throw std::invalid_argument("--kernels " + name + ": " + e.what());
  }
#else
  throw std::invalid_argument("--kernels " + name +
                              ": this build has no CUDA backend (nvcc was not found when CMake configured it)");
#endif
}

}  // namespace moe::cli
