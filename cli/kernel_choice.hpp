// `--kernels NAME`: which dist::KernelBackend does the data work (row moves, grouped SwiGLU) of the parallel
// system in `moe-oracle check`:
//   cpu                    Eigen + OpenMP (distributed/kernels/cpu_kernels.cpp), the default;
//   cuda                   the CUDA kernels with cuBLAS GEMMs (cuda/device_kernels.hpp), on GPU 0, or on the rank's
//                          own GPU under --backend nccl;
//   cuda-batch-invariant   the same with the fixed-order GEMM (a token's result ignores the rest of the batch).
// The CUDA names need a build with the CUDA backend and a visible GPU; otherwise an error says which is missing.
#pragma once

#include "distributed/comm/communicator.hpp"
#include "distributed/kernels/kernel_backend.hpp"
#include "reference/named.hpp"

#include <memory>
#include <span>
#include <string>

#ifdef MOE_ORACLE_HAVE_CUDA
namespace moe::cuda {
enum class GemmMode;  // cuda/device_context.hpp
}  // namespace moe::cuda
#endif

namespace moe::cli {

enum class Kernels { cpu, cuda, cuda_batch_invariant };
inline constexpr Named<Kernels> kKernelNames[] = {
    {Kernels::cpu, "cpu"}, {Kernels::cuda, "cuda"}, {Kernels::cuda_batch_invariant, "cuda-batch-invariant"}};
constexpr std::span<const Named<Kernels>> names_of(Kernels) { return kKernelNames; }

// Whether the kernels run on a GPU (one device serves every run, and the device layer is checked too). Every value
// answers by name: a backend added to Kernels must say, the build stops at this switch until it does.
constexpr bool on_device(Kernels kernels) {
  switch (kernels) {
    case Kernels::cpu: return false;
    case Kernels::cuda:
    case Kernels::cuda_batch_invariant: return true;
  }
  return false;  // not reached: the switch names every value
}

#ifdef MOE_ORACLE_HAVE_CUDA
// The GEMM a device backend runs; refused for a backend that is not on the device.
cuda::GemmMode gemm_mode(Kernels kernels);
#endif

class KernelChoice {
 public:
  // Throws std::invalid_argument where the CUDA backend is missing.
  explicit KernelChoice(Kernels kernels, int device = 0);
  const dist::KernelBackend& backend() const { return owned_ ? *owned_ : dist::cpu_kernels(); }
  // What ran on the device, for the report: "" for cpu, else the kernel calls that reached it, the grouped SwiGLU
  // calls whose GEMMs ran on bf16 operands and the grouped GEMM that ran them (CUTLASS's one launch, with the count
  // that fell back to lanes, or lanes where the build has no CUTLASS).
  std::string device_summary() const;

 private:
  std::unique_ptr<const dist::KernelBackend> owned_;
};

// --backend nccl: the job's ranks as NCCL ranks, one GPU each (cuda/nccl_world.hpp); collective over `job`, which must
// outlive the result. Throws std::invalid_argument where the build or the machine lacks what it needs.
struct DeviceRanks {
  int device = 0;
  std::unique_ptr<Communicator> world;  // host buffers in, collectives in NCCL
};
DeviceRanks join_device_ranks(Communicator& job);

}  // namespace moe::cli
