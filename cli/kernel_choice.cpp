#include "cli/kernel_choice.hpp"

#include <stdexcept>
#include <string>

#ifdef MOE_ORACLE_HAVE_CUDA
#include "cuda/cutlass_grouped_gemm.hpp"
#include "cuda/device_kernels.hpp"
#include "cuda/nccl_world.hpp"
#endif

namespace moe::cli {

#ifdef MOE_ORACLE_HAVE_CUDA
cuda::GemmMode gemm_mode(Kernels kernels) {
  switch (kernels) {
    case Kernels::cuda: return cuda::GemmMode::cublas;
    case Kernels::cuda_batch_invariant: return cuda::GemmMode::batch_invariant;
    case Kernels::cpu: break;
  }
  throw std::logic_error("--kernels " + std::string(name_of(kernels)) + " runs no GEMM on the device");
}
#endif

KernelChoice::KernelChoice(Kernels kernels, int device) {
  if (!on_device(kernels)) return;
  const std::string flag = "--kernels " + std::string(name_of(kernels));
#ifdef MOE_ORACLE_HAVE_CUDA
  try {
    owned_ = std::make_unique<cuda::DeviceKernels>(device, gemm_mode(kernels));
  } catch (const std::runtime_error& e) {
    throw std::invalid_argument(flag + ": " + e.what());
  }
#else
  (void)device;
  throw std::invalid_argument(flag + ": this build has no CUDA backend (nvcc was not found when CMake configured it)");
#endif
}

std::string KernelChoice::device_summary() const {
#ifdef MOE_ORACLE_HAVE_CUDA
  const auto* device = dynamic_cast<const cuda::DeviceKernels*>(owned_.get());
  if (device == nullptr) return "";
  return "device: " + std::to_string(device->device_calls()) + " kernel calls; grouped SwiGLU on bf16 operands: " +
         std::to_string(device->bf16_operand_calls()) + " calls (" +
         (cuda::cutlass_grouped_available() ? "CUTLASS grouped kernel; " + std::to_string(device->grouped_fallbacks()) +
                                                  " grouped GEMMs fell back to lanes"
                                            : std::string("cuBLAS on lanes: this build has no CUTLASS")) +
         ")";
#else
  return "";
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
