// The CUTLASS grouped kernel of cutlass_grouped_gemm.hpp. Built for sm_90a (wgmma and TMA are features of that
// target, not of plain sm_90), only where CMake found CUTLASS; cutlass_unavailable.cpp stands in otherwise.
//
// One kernel per (layout of A', layout of B') of the column-major problem Cᵀ = op(B)ᵀ·op(A)ᵀ:
//   A' = our B: ColumnMajor (its M contiguous) when op_b = n, RowMajor (its K contiguous) when op_b = t;
//   B' = our A: ColumnMajor (its K contiguous) when op_a = n, RowMajor (its N contiguous) when op_a = t;
//   C' = our C: ColumnMajor, leading dimension ldc (a row of our C is a column of C').
// Tile 256 (weights) × 128 (tokens) × 64 with the cooperative schedule and clusters of one CTA: multicast over a
// cluster pays only when neighbouring tiles share operands, which the tiles of different experts do not.
#include "cuda/cutlass_grouped_gemm.hpp"

#include "cuda/cuda_error.hpp"

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/group_array_problem_shape.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace moe::cuda {
namespace {

using Element = cutlass::bfloat16_t;
using ColumnMajor = cutlass::layout::ColumnMajor;
using RowMajor = cutlass::layout::RowMajor;
constexpr int kAlignment = 8;  // elements per 16 bytes: TMA's unit

// The kernel types, stamped out per layout pair at namespace scope: GCC (nvcc's host compiler) fails to parse
// CUTLASS's collective builders inside a class template, where their names become dependent.
using ProblemShape = cutlass::gemm::GroupProblemShape<cute::Shape<int, int, int>>;
using TileShape = cute::Shape<cute::_256, cute::_128, cute::_64>;
using ClusterShape = cute::Shape<cute::_1, cute::_1, cute::_1>;

// The epilogue writing C' of type OUT (D = alpha·accumulator + beta·C, in place).
#define MOE_GROUPED_EPILOGUE(NAME, OUT)                                                                            \
  using NAME = cutlass::epilogue::collective::CollectiveBuilder<                                                 \
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,                              \
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, OUT, ColumnMajor*, 16 / int(sizeof(OUT)), OUT, \
      ColumnMajor*, 16 / int(sizeof(OUT)), cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative,             \
      cutlass::epilogue::fusion::LinearCombination<OUT, float>>::CollectiveOp;
MOE_GROUPED_EPILOGUE(Bf16Epilogue, Element)
MOE_GROUPED_EPILOGUE(FloatEpilogue, float)
#undef MOE_GROUPED_EPILOGUE

#define MOE_GROUPED_KERNEL(NAME, LAYOUT_A, LAYOUT_B, EPILOGUE, OUT)                                               \
  struct NAME {                                                                                                  \
    using Out = OUT;                                                                                             \
    using Mainloop = cutlass::gemm::collective::CollectiveBuilder<                                               \
        cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Element, LAYOUT_A*, kAlignment, Element, LAYOUT_B*,  \
        kAlignment, float, TileShape, ClusterShape,                                                              \
        cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(EPILOGUE::SharedStorage))>,    \
        cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative>::CollectiveOp;                               \
    using Kernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, Mainloop, EPILOGUE>;                       \
    using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;                                            \
    using Shape = ProblemShape::UnderlyingProblemShape;                                                          \
    using StrideA = Kernel::InternalStrideA;                                                                     \
    using StrideB = Kernel::InternalStrideB;                                                                     \
    using StrideC = Kernel::InternalStrideC;                                                                     \
    using StrideD = Kernel::InternalStrideD;                                                                     \
  };
MOE_GROUPED_KERNEL(ForwardKernel, RowMajor, ColumnMajor, Bf16Epilogue, Element)              // op (n, t)
MOE_GROUPED_KERNEL(DataGradientKernel, ColumnMajor, ColumnMajor, Bf16Epilogue, Element)      // op (n, n)
MOE_GROUPED_KERNEL(WeightGradientKernel, ColumnMajor, RowMajor, Bf16Epilogue, Element)       // op (t, n)
MOE_GROUPED_KERNEL(ForwardFloatKernel, RowMajor, ColumnMajor, FloatEpilogue, float)          // the same, float C
MOE_GROUPED_KERNEL(DataGradientFloatKernel, ColumnMajor, ColumnMajor, FloatEpilogue, float)
MOE_GROUPED_KERNEL(WeightGradientFloatKernel, ColumnMajor, RowMajor, FloatEpilogue, float)
#undef MOE_GROUPED_KERNEL

// A stride of a matrix with leading dimension ld: its one dynamic mode among the first two is ld (the other is the
// static unit stride of the contiguous extent); the group mode, if dynamic, is 0.
template <class Stride>
Stride leading(std::int64_t ld) {
  Stride s{};
  if constexpr (cute::is_static<cute::remove_cvref_t<decltype(cute::get<0>(s))>>::value) cute::get<1>(s) = ld;
  else cute::get<0>(s) = ld;
  return s;
}

int sm_count() {
  int device = 0;
  MOE_CUDA_CHECK(cudaGetDevice(&device));
  return cutlass::KernelHardwareInfo::query_device_multiprocessor_count(device);
}

// Appends `n` objects of type V to `bytes` at a 16-byte boundary and returns their offset.
template <class V>
std::size_t reserve(std::vector<unsigned char>& bytes, std::size_t n) {
  const std::size_t at = (bytes.size() + 15) / 16 * 16;
  bytes.resize(at + n * sizeof(V));
  return at;
}

void check_cutlass(cutlass::Status status, const char* what) {
  if (status != cutlass::Status::kSuccess)
    throw std::runtime_error(std::string("CUTLASS grouped GEMM: ") + what + " failed: " +
                             cutlassGetStatusString(status));
}

// Our problem's C type for kernel K's output (cutlass::bfloat16_t is our bf16's bits).
template <class K>
using OurOut = std::conditional_t<std::is_same_v<typename K::Out, float>, float, bf16>;

template <class K>
bool run_grouped(cudaStream_t stream, Op op_a, Op op_b, const GemmProblem<bf16, OurOut<K>>* problems,
                 std::size_t count, int beta) {
  using Out = typename K::Out;
  const int groups = static_cast<int>(count);
  for (std::size_t i = 0; i < count; ++i)
    if (!cutlass_takes(op_a, op_b, problems[i])) return false;
  // Every argument array in one upload: shapes, the pointers of A', B', C, D and their strides. The shapes are read
  // on the host too (the scheduler's grid), from the same bytes.
  std::vector<unsigned char> bytes;
  const std::size_t shapes_at = reserve<typename K::Shape>(bytes, count);
  const std::size_t a_at = reserve<const Element*>(bytes, count), b_at = reserve<const Element*>(bytes, count);
  const std::size_t c_at = reserve<const Out*>(bytes, count), d_at = reserve<Out*>(bytes, count);
  const std::size_t sa_at = reserve<typename K::StrideA>(bytes, count);
  const std::size_t sb_at = reserve<typename K::StrideB>(bytes, count);
  const std::size_t sc_at = reserve<typename K::StrideC>(bytes, count);
  const std::size_t sd_at = reserve<typename K::StrideD>(bytes, count);
  auto* shapes = reinterpret_cast<typename K::Shape*>(bytes.data() + shapes_at);
  auto* ptr_a = reinterpret_cast<const Element**>(bytes.data() + a_at);
  auto* ptr_b = reinterpret_cast<const Element**>(bytes.data() + b_at);
  auto* ptr_c = reinterpret_cast<const Out**>(bytes.data() + c_at);
  auto* ptr_d = reinterpret_cast<Out**>(bytes.data() + d_at);
  auto* stride_a = reinterpret_cast<typename K::StrideA*>(bytes.data() + sa_at);
  auto* stride_b = reinterpret_cast<typename K::StrideB*>(bytes.data() + sb_at);
  auto* stride_c = reinterpret_cast<typename K::StrideC*>(bytes.data() + sc_at);
  auto* stride_d = reinterpret_cast<typename K::StrideD*>(bytes.data() + sd_at);
  for (std::size_t i = 0; i < count; ++i) {
    const GemmProblem<bf16, OurOut<K>>& p = problems[i];
    shapes[i] = typename K::Shape(static_cast<int>(p.n), static_cast<int>(p.m), static_cast<int>(p.k));
    ptr_a[i] = reinterpret_cast<const Element*>(p.b);
    ptr_b[i] = reinterpret_cast<const Element*>(p.a);
    ptr_c[i] = reinterpret_cast<const Out*>(p.c);
    ptr_d[i] = reinterpret_cast<Out*>(p.c);
    stride_a[i] = leading<typename K::StrideA>(p.ldb);
    stride_b[i] = leading<typename K::StrideB>(p.lda);
    stride_c[i] = leading<typename K::StrideC>(p.ldc);
    stride_d[i] = leading<typename K::StrideD>(p.ldc);
  }
  unsigned char* device = nullptr;
  MOE_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&device), bytes.size(), stream));
  // From pageable memory: returns once the bytes are staged, so `bytes` may go at the end of this function.
  MOE_CUDA_CHECK(cudaMemcpyAsync(device, bytes.data(), bytes.size(), cudaMemcpyHostToDevice, stream));

  cutlass::KernelHardwareInfo hw;
  MOE_CUDA_CHECK(cudaGetDevice(&hw.device_id));
  static const int sms = sm_count();
  hw.sm_count = sms;
  typename K::Gemm::Arguments arguments{
      cutlass::gemm::GemmUniversalMode::kGrouped,
      {groups, reinterpret_cast<typename K::Shape*>(device + shapes_at), shapes},
      {reinterpret_cast<const Element**>(device + a_at), reinterpret_cast<typename K::StrideA*>(device + sa_at),
       reinterpret_cast<const Element**>(device + b_at), reinterpret_cast<typename K::StrideB*>(device + sb_at)},
      {{},
       reinterpret_cast<const Out**>(device + c_at), reinterpret_cast<typename K::StrideC*>(device + sc_at),
       reinterpret_cast<Out**>(device + d_at), reinterpret_cast<typename K::StrideD*>(device + sd_at)},
      hw};
  arguments.epilogue.thread.alpha = 1.0f;
  arguments.epilogue.thread.beta = static_cast<float>(beta);

  typename K::Gemm gemm;
  const bool fits = gemm.can_implement(arguments) == cutlass::Status::kSuccess;
  void* workspace = nullptr;
  if (fits) {
    const std::size_t workspace_bytes = K::Gemm::get_workspace_size(arguments);
    if (workspace_bytes > 0) MOE_CUDA_CHECK(cudaMallocAsync(&workspace, workspace_bytes, stream));
    check_cutlass(gemm.initialize(arguments, workspace, stream), "initialize");
    check_cutlass(gemm.run(stream), "run");
    if (workspace != nullptr) MOE_CUDA_CHECK(cudaFreeAsync(workspace, stream));
  }
  MOE_CUDA_CHECK(cudaFreeAsync(device, stream));
  return fits;
}

}  // namespace

bool cutlass_grouped_available() { return true; }

namespace {

// The kernel of ops (op_a, op_b) among three; (t, t) has none.
template <class Forward, class DataGradient, class WeightGradient, class Problem>
bool by_ops(cudaStream_t stream, Op op_a, Op op_b, const Problem* problems, std::size_t count, int beta) {
  if (count == 0) return true;
  if (op_a == Op::n && op_b == Op::t) return run_grouped<Forward>(stream, op_a, op_b, problems, count, beta);
  if (op_a == Op::n && op_b == Op::n) return run_grouped<DataGradient>(stream, op_a, op_b, problems, count, beta);
  if (op_a == Op::t && op_b == Op::n) return run_grouped<WeightGradient>(stream, op_a, op_b, problems, count, beta);
  return false;
}

}  // namespace

bool cutlass_grouped_gemm(cudaStream_t stream, Op op_a, Op op_b, const GemmProblem<bf16>* problems, std::size_t count,
                          int beta) {
  return by_ops<ForwardKernel, DataGradientKernel, WeightGradientKernel>(stream, op_a, op_b, problems, count, beta);
}

bool cutlass_grouped_gemm(cudaStream_t stream, Op op_a, Op op_b, const GemmProblem<bf16, float>* problems,
                          std::size_t count, int beta) {
  return by_ops<ForwardFloatKernel, DataGradientFloatKernel, WeightGradientFloatKernel>(stream, op_a, op_b, problems,
                                                                                         count, beta);
}

}  // namespace moe::cuda
