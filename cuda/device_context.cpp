#include "cuda/device_context.hpp"

#include "cuda/cublas_library.hpp"
#include "cuda/cuda_error.hpp"
#include "cuda/cutlass_grouped_gemm.hpp"
#include "reference/named.hpp"

#include <cstdlib>
#include <stdexcept>
#include <string>

namespace moe::cuda {
namespace {

// A cuBLAS handle bound to `stream` with plain fp32 arithmetic for float data: TF32 would make float results
// incomparable with the CPU's.
cublasHandle_t make_handle(cudaStream_t stream) {
  cublasHandle_t handle = nullptr;
  MOE_CUBLAS_CHECK(cublas().create(&handle));
  try {
    MOE_CUBLAS_CHECK(cublas().set_stream(handle, stream));
    MOE_CUBLAS_CHECK(cublas().set_math_mode(handle, CUBLAS_DEFAULT_MATH));
  } catch (...) {
    cublas().destroy(handle);
    throw;
  }
  return handle;
}

void release(GemmLane& lane) noexcept {
  if (lane.handle != nullptr) cublas().destroy(lane.handle);
  if (lane.done != nullptr) cudaEventDestroy(lane.done);
  if (lane.stream != nullptr) cudaStreamDestroy(lane.stream);
}

}  // namespace

GroupedGemm default_grouped_gemm() {
  const char* chosen = std::getenv("MOE_GROUPED_GEMM");
  if (chosen == nullptr || *chosen == '\0')
    return cutlass_grouped_available() ? GroupedGemm::cutlass : GroupedGemm::lanes;
  constexpr Named<GroupedGemm> names[] = {{GroupedGemm::one_launch, "one_launch"},
                                          {GroupedGemm::lanes, "lanes"},
                                          {GroupedGemm::per_group, "per_group"},
                                          {GroupedGemm::cutlass, "cutlass"}};
  const std::optional<GroupedGemm> way = find_named<GroupedGemm>(chosen, names);
  if (!way)
    throw std::invalid_argument("MOE_GROUPED_GEMM=" + std::string(chosen) + ": expected one of " +
                                name_list<GroupedGemm>(names));
  if (*way == GroupedGemm::cutlass && !cutlass_grouped_available())
    throw std::invalid_argument("MOE_GROUPED_GEMM=cutlass: this build has no CUTLASS (tools/fetch-cutlass)");
  return *way;
}

DeviceContext::DeviceContext(GemmMode mode, GroupedGemm grouped, int lanes)
    : mode_(mode), grouped_(grouped), lane_count_(lanes) {
  if (lanes < 1) throw std::invalid_argument("DeviceContext: lanes must be >= 1, got " + std::to_string(lanes));
  // A blocking stream: it waits for work on the legacy default stream, where DeviceBuffer's blocking uploads and
  // default zero() run (a pageable cudaMemcpy may return before its DMA lands), so no caller has to order those.
  MOE_CUDA_CHECK(cudaStreamCreate(&stream_));
  try {
    cublas_ = make_handle(stream_);
    MOE_CUDA_CHECK(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming));
  } catch (...) {
    if (cublas_ != nullptr) cublas().destroy(cublas_);
    cudaStreamDestroy(stream_);
    throw;
  }
}

DeviceContext::~DeviceContext() {
  for (auto& lane : lanes_) release(lane);
  cudaEventDestroy(fork_);
  cublas().destroy(cublas_);
  cudaStreamDestroy(stream_);
}

const std::vector<GemmLane>& DeviceContext::lanes() const {
  while (lanes_.size() < std::size_t(lane_count_)) {
    GemmLane lane;
    try {
      // Non-blocking: the lanes are ordered against stream() by events only.
      MOE_CUDA_CHECK(cudaStreamCreateWithFlags(&lane.stream, cudaStreamNonBlocking));
      MOE_CUDA_CHECK(cudaEventCreateWithFlags(&lane.done, cudaEventDisableTiming));
      lane.handle = make_handle(lane.stream);
    } catch (...) {
      release(lane);
      throw;
    }
    lanes_.push_back(lane);
  }
  return lanes_;
}

void DeviceContext::synchronize() const { MOE_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

}  // namespace moe::cuda
