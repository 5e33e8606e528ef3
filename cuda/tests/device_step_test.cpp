// The parallel system with its data work on the GPU (DeviceKernels) against the oracle. First each operation of
// the backend against the CPU backend on the same inputs (row moves exactly; grouped SwiGLU within the dtype's
// tolerance, gpu_test.hpp), then whole training steps: the backend conformance set of
// distributed/tests/kernel_backend_cases.hpp (every dispatcher on EP × ETP, TP + SP + CP and pipeline layouts,
// float, clamp / gate / latent / probs-on-input / drop-and-pad) on in-process ranks that share one GPU, with the
// oracle's tolerances (docs/numerics.md). On a machine without a GPU these tests report "skipped: no GPU".
#include "cuda/cutlass_grouped_gemm.hpp"
#include "cuda/device_kernels.hpp"
#include "cuda/device_probe.hpp"
#include "cuda/tests/gpu_test.hpp"
#include "distributed/tests/kernel_backend_cases.hpp"

namespace moe::cuda {
namespace {

using namespace testing;

template <typename T>
Matrix<T> random_matrix(Eigen::Index rows, Eigen::Index cols, unsigned seed) {
  const auto v = uniform(std::size_t(rows * cols), seed);
  return Eigen::Map<const Matrix<double>>(v.data(), rows, cols).cast<T>();
}

template <typename T>
std::vector<T> flat(const Matrix<T>& m) {
  return {m.data(), m.data() + m.size()};
}

template <typename T>
void check_operations(GemmMode mode) {
  const DeviceKernels device(0, mode);
  const dist::KernelBackend& cpu = dist::cpu_kernels();
  const Matrix<T> x = random_matrix<T>(7, 12, 1);
  const dist::RowIndex rows{6, 0, 0, 3, 5, 6, 1, 2, 4};  // duplicates and every row

  EXPECT_EQ(flat(device.gather_rows(x, rows)), flat(cpu.gather_rows(x, rows)));
  const Matrix<T> y = random_matrix<T>(9, 12, 2);
  EXPECT_EQ(flat(device.scatter_add_rows(y, rows, 7)), flat(cpu.scatter_add_rows(y, rows, 7)))
      << "scatter-add accumulates in the CPU's order, so it must match bit for bit";

  // Three local experts, one of them empty, on an ETP-shard-shaped [2d, w] / [w, d] pair each.
  const dist::RowIndex groups{4, 0, 5};
  kernels::ExpertShards<T> w, g_dev, g_cpu;
  for (unsigned e = 0; e < 3; ++e) {
    w.fc1.push_back(random_matrix<T>(2 * 6, 12, 10 + e));
    w.fc2.push_back(random_matrix<T>(12, 6, 20 + e));
    g_dev.fc1.push_back(random_matrix<T>(2 * 6, 12, 30 + e));  // accumulated into, not overwritten
    g_dev.fc2.push_back(random_matrix<T>(12, 6, 40 + e));
  }
  g_cpu = g_dev;
  const Vector<T> probs = random_matrix<T>(9, 1, 4);
  const Matrix<T> dy = random_matrix<T>(9, 12, 5);
  kernels::SwigluOptions clamp;
  clamp.clamp = 0.3;
  const auto f_dev = device.grouped_swiglu_forward(y, groups, w, probs, clamp);
  const auto f_cpu = cpu.grouped_swiglu_forward(y, groups, w, probs, clamp);
  expect_close(flat(f_dev.y), flat(f_cpu.y), tolerance<T>(), "y");
  expect_close(flat(f_dev.pre), flat(f_cpu.pre), tolerance<T>(), "pre");
  const auto b_dev = device.grouped_swiglu_backward(y, groups, w, probs, clamp, f_cpu.pre, dy, g_dev);
  const auto b_cpu = cpu.grouped_swiglu_backward(y, groups, w, probs, clamp, f_cpu.pre, dy, g_cpu);
  expect_close(flat(b_dev.dx), flat(b_cpu.dx), tolerance<T>(), "dx");
  expect_close(std::vector<T>(b_dev.dprob.data(), b_dev.dprob.data() + b_dev.dprob.size()),
               std::vector<T>(b_cpu.dprob.data(), b_cpu.dprob.data() + b_cpu.dprob.size()), tolerance<T>(), "dprob");
  for (std::size_t e = 0; e < 3; ++e) {
    expect_close(flat(g_dev.fc1[e]), flat(g_cpu.fc1[e]), tolerance<T>(), "grad fc1 " + std::to_string(e));
    expect_close(flat(g_dev.fc2[e]), flat(g_cpu.fc2[e]), tolerance<T>(), "grad fc2 " + std::to_string(e));
  }
  EXPECT_EQ(device.device_calls(), 4);

  // No rows: nothing reaches the device, and the shapes are still right.
  const auto empty = device.grouped_swiglu_forward(Matrix<T>(0, 12), {0, 0, 0}, w, Vector<T>(0), clamp);
  EXPECT_EQ(empty.y.rows(), 0);
  EXPECT_EQ(empty.pre.cols(), 12);
  EXPECT_EQ(device.gather_rows(x, {}).rows(), 0);
  EXPECT_EQ(device.device_calls(), 4);
  EXPECT_THROW(device.gather_rows(x, {7}), std::out_of_range);
}

TEST(CudaDeviceKernels, OperationsMatchTheCpuBackendDouble) {
  MOE_REQUIRE_GPU();
  check_operations<double>(GemmMode::cublas);
  check_operations<double>(GemmMode::batch_invariant);
}

TEST(CudaDeviceKernels, OperationsMatchTheCpuBackendFloat) {
  MOE_REQUIRE_GPU();
  check_operations<float>(GemmMode::cublas);
  check_operations<float>(GemmMode::batch_invariant);
}

// A float step with bf16 storage whose operands hold bf16 values runs its six GEMMs on bf16 copies (the kernel the
// benchmark times: CUTLASS's one launch where built, at this 16-byte aligned shape with no fallback), within the bf16
// row of the CPU's results; an operand off the bf16 grid keeps the float GEMMs.
TEST(CudaDeviceKernels, Bf16StorageRunsTheGemmsOnBf16Operands) {
  MOE_REQUIRE_GPU();
  const DeviceKernels device(0, GemmMode::cublas);
  const dist::KernelBackend& cpu = dist::cpu_kernels();
  const auto on_grid = [](const Matrix<float>& m) {
    return Matrix<float>(m.unaryExpr([](float v) { return to_float(to_bf16(v)); }));
  };
  const dist::RowIndex groups{4, 0, 5};
  constexpr int w = 16, d = 8;
  kernels::ExpertShards<float> weights, g_dev, g_cpu;
  for (unsigned e = 0; e < 3; ++e) {
    weights.fc1.push_back(on_grid(random_matrix<float>(2 * d, w, 10 + e)));
    weights.fc2.push_back(on_grid(random_matrix<float>(w, d, 20 + e)));
    g_dev.fc1.push_back(Matrix<float>::Zero(2 * d, w));
    g_dev.fc2.push_back(Matrix<float>::Zero(w, d));
  }
  g_cpu = g_dev;
  const Matrix<float> x = on_grid(random_matrix<float>(9, w, 1)), dy = on_grid(random_matrix<float>(9, w, 5));
  const Vector<float> probs = random_matrix<float>(9, 1, 4);
  kernels::SwigluOptions stored;
  stored.bf16 = true;
  const auto tol = tolerance<bf16>();  // a sum in another order can round to the neighbouring bf16
  const auto f_dev = device.grouped_swiglu_forward(x, groups, weights, probs, stored);
  const auto f_cpu = cpu.grouped_swiglu_forward(x, groups, weights, probs, stored);
  expect_close(flat(f_dev.y), flat(f_cpu.y), tol, "y");
  expect_close(flat(f_dev.pre), flat(f_cpu.pre), tol, "pre");
  const auto b_dev = device.grouped_swiglu_backward(x, groups, weights, probs, stored, f_cpu.pre, dy, g_dev);
  const auto b_cpu = cpu.grouped_swiglu_backward(x, groups, weights, probs, stored, f_cpu.pre, dy, g_cpu);
  expect_close(flat(b_dev.dx), flat(b_cpu.dx), tol, "dx");
  for (std::size_t e = 0; e < 3; ++e) {
    expect_close(flat(g_dev.fc1[e]), flat(g_cpu.fc1[e]), tol, "grad fc1 " + std::to_string(e));
    expect_close(flat(g_dev.fc2[e]), flat(g_cpu.fc2[e]), tol, "grad fc2 " + std::to_string(e));
  }
  EXPECT_EQ(device.bf16_operand_calls(), 2);
  if (cutlass_grouped_available()) {
    EXPECT_EQ(device.grouped_fallbacks(), 0);
  }

  Matrix<float> off_grid = x;
  off_grid(0, 0) += 1e-4f;
  device.grouped_swiglu_forward(off_grid, groups, weights, probs, stored);
  EXPECT_EQ(device.bf16_operand_calls(), 2) << "x off the bf16 grid must keep the float GEMMs";
}

// Runs on every machine: asking for a device that is not there is an error that says how many there are.
TEST(CudaDeviceKernels, RefusesAMissingDevice) {
  const int visible = visible_device_count();
  try {
    DeviceKernels missing(visible);
    FAIL() << "constructed on device " << visible;
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(visible) + " visible"), std::string::npos) << e.what();
  }
}

class CudaDeviceStep : public ::testing::TestWithParam<dist::BackendCase> {};

void expect_step_matches(const dist::BackendCase& c, GemmMode mode) {
  const DeviceKernels device(0, mode);
  dist::InstrumentedKernels kernels(device);
  const dist::CheckProblem p = dist::backend_problem(c, kernels);
  const dist::RankComparison r = dist::check_inproc(p, dist::oracle_step(p));
  EXPECT_TRUE(r.pass()) << r.first.tensor << " rank " << r.first.rank << " [" << r.first.index << "]: got "
                        << r.first.got << ", want " << r.first.want;
  EXPECT_GT(r.errors[static_cast<size_t>(dist::Quantity::grad_expert)].compared, 0);
  for (auto op : dist::InstrumentedKernels::kEveryOp)
    EXPECT_GT(kernels.calls(op), 0) << "operation " << op << " never reached the backend";
  EXPECT_GT(device.device_calls(), 0);
}

TEST_P(CudaDeviceStep, MatchesTheOracle) {
  MOE_REQUIRE_GPU();
  expect_step_matches(GetParam(), GemmMode::cublas);
}

TEST_P(CudaDeviceStep, MatchesTheOracleWithTheBatchInvariantGemm) {
  MOE_REQUIRE_GPU();
  expect_step_matches(GetParam(), GemmMode::batch_invariant);
}

INSTANTIATE_TEST_SUITE_P(Cuda, CudaDeviceStep, ::testing::ValuesIn(dist::kernel_backend_cases()),
                         [](const auto& param_info) { return param_info.param.name; });

}  // namespace
}  // namespace moe::cuda
