// DeviceContext: the stream and cuBLAS handle one thread's kernels run on, the GEMM mode and how groups of GEMMs
// (a rank's local experts) are run.
//   GemmMode::cublas           cuBLAS (fp32 compute for float/bf16 data, no TF32; fp64 for double): fast, but
//                              the kernel cuBLAS picks depends on the shape, so a row's result may depend on how
//                              many rows share its GEMM;
//   GemmMode::batch_invariant  our fixed-order tiled GEMM (batch_invariant_gemm.cu): every output element sums
//                              its k products in increasing k, whatever m and n are, so a token's output does not
//                              depend on the other tokens in the batch (the deterministic mode). Slow.
//   GroupedGemm (GemmMode::cublas only; grouped_gemm.hpp):
//     lanes       one cublasGemmEx per group, spread round-robin over side streams ("lanes", each with its own
//                 cuBLAS handle and workspace), joined back into stream() (default);
//     one_launch  cublasGemmGroupedBatchedEx: all groups in one call;
//     per_group   one cublasGemmEx per group on stream(), one after another;
//     cutlass     CUTLASS's Hopper grouped kernel, every group's tiles in one persistent launch
//                 (cutlass_grouped_gemm.hpp; bf16). The default where the build has it. Double and float data run
//                 on lanes; bf16 problems it does not take (unaligned shapes, k = 0, ops (t, t)) too, counted by
//                 grouped_fallbacks().
//   256 experts of ~192 rows each give GEMMs that alone fill about half of an H200's SMs; lanes let several run at
//   once. On an H200 (2026-12-04, V4-Flash shape, docs/performance.md, "On a GPU") lanes were the fastest: forward 38.6% of dense
//   cuBLAS against 34.0% per group and 28.2% for cuBLAS 13.0's grouped call. The benchmark times them all, and the
//   CUTLASS kernel, which has not run on a GPU yet (written 2026-12-05 without one).
// Kernels are enqueued on stream(); host wrappers that need data on the host (group sizes) synchronise it.
// This header stays C++17 (nvcc compiles it).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

namespace moe::cuda {

enum class GemmMode { cublas, batch_invariant };
enum class GroupedGemm { one_launch, lanes, per_group, cutlass };

// $MOE_GROUPED_GEMM (one_launch, lanes, per_group or cutlass) where set, so a GPU session can set a new kernel
// aside without a rebuild; else cutlass where the build has the CUTLASS kernel, else lanes. An unknown value, or
// cutlass in a build without it, throws std::invalid_argument.
GroupedGemm default_grouped_gemm();

// A side stream with its own cuBLAS handle, and the event that marks the end of its share of a grouped GEMM.
struct GemmLane {
  cudaStream_t stream = nullptr;
  cublasHandle_t handle = nullptr;
  cudaEvent_t done = nullptr;
};

class DeviceContext {
 public:
  static constexpr int default_lanes = 8;

  // Uses the current device (cudaSetDevice before constructing one per thread). lanes >= 1.
  explicit DeviceContext(GemmMode mode = GemmMode::cublas, GroupedGemm grouped = default_grouped_gemm(),
                         int lanes = default_lanes);
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;
  ~DeviceContext();

  cudaStream_t stream() const { return stream_; }
  cublasHandle_t cublas_handle() const { return cublas_; }
  GemmMode mode() const { return mode_; }
  GroupedGemm grouped() const { return grouped_; }
  // The side lanes of GroupedGemm::lanes, created on first use and kept.
  const std::vector<GemmLane>& lanes() const;
  // An event recorded on stream() that the lanes wait for before their GEMMs (the fork of a grouped GEMM).
  cudaEvent_t fork_event() const { return fork_; }
  void synchronize() const;
  // Grouped GEMMs that GroupedGemm::cutlass ran on lanes instead (the tests and the benchmark check it is 0).
  std::int64_t grouped_fallbacks() const { return grouped_fallbacks_; }
  void count_grouped_fallback() const { ++grouped_fallbacks_; }

 private:
  GemmMode mode_;
  GroupedGemm grouped_;
  int lane_count_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  cudaEvent_t fork_ = nullptr;
  mutable std::vector<GemmLane> lanes_;
  mutable std::int64_t grouped_fallbacks_ = 0;
};

}  // namespace moe::cuda
