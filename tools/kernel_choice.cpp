#include "tools/kernel_choice.hpp"

#include <stdexcept>
#include <string>

#ifdef MOE_ORACLE_HAVE_CUDA
#include "cuda/device_kernels.hpp"
#include "cuda/nccl_world.hpp"
#endif

namespace moe::cli {

KernelChoice::KernelChoice(Kernels kernels, int device) {
  if (kernels == Kernels::cpu) return;
  const std::string flag = "--kernels " + std::string(name_of(kernels));
#ifdef MOE_ORACLE_HAVE_CUDA
  try {
    owned_ = std::make_unique<cuda::DeviceKernels>(
        device, kernels == Kernels::cuda ? cuda::GemmMode::cublas : cuda::GemmMode::batch_invariant);
  } catch (const std::runtime_error& e) {
    throw std::invalid_argument(flag + ": " + e.what());
  }
#else
  (void)device;
  throw std::invalid_argument(flag + ": this build has no CUDA backend (nvcc was not found when CMake configured it)");
#endif
}

DeviceRanks join_device_ranks(Communicator& job) {
#ifdef MOE_ORACLE_HAVE_CUDA
  cuda::NcclWorld nccl = cuda::join_nccl_world(job);
  return {nccl.device, std::move(nccl.world)};
#else
  (void)job;
  throw std::invalid_argument("--backend nccl: this build has no CUDA backend (nvcc was not found when CMake "
                              "configured it)");
#endif
}

}  // namespace moe::cli
