// The CPU backend through the KernelBackend interface on the backend conformance set (kernel_backend_cases.hpp):
// every case matches the oracle and sends all four kinds of data work through the backend; a fault planted in any
// one operation's output is caught. The CUDA backend runs the same set in cuda/tests/device_step_test.cpp.
#include "distributed/tests/kernel_backend_cases.hpp"

#include <gtest/gtest.h>

namespace moe::dist {
namespace {

class KernelBackendCase : public ::testing::TestWithParam<BackendCase> {};

TEST_P(KernelBackendCase, CpuBackendMatchesTheOracleAndDoesAllTheDataWork) {
  InstrumentedKernels kernels(cpu_kernels());
  const CheckProblem p = backend_problem(GetParam(), kernels);
  const RankComparison r = check_inproc(p, oracle_step(p));
  EXPECT_TRUE(r.pass()) << r.first.tensor << " rank " << r.first.rank << " [" << r.first.index << "]: got "
                        << r.first.got << ", want " << r.first.want;
  EXPECT_GT(r.errors[static_cast<size_t>(Quantity::grad_expert)].compared, 0);
  for (auto op : InstrumentedKernels::kEveryOp)
    EXPECT_GT(kernels.calls(op), 0) << "operation " << op << " never reached the backend";
}

INSTANTIATE_TEST_SUITE_P(Cases, KernelBackendCase, ::testing::ValuesIn(kernel_backend_cases()),
                         [](const auto& param_info) { return param_info.param.name; });

TEST(KernelBackendFault, AFaultInAnyOperationIsCaught) {
  int tried = 0;
  for (const BackendCase& c : kernel_backend_cases()) {
    if (c.name != "alltoall_ep2_etp2" && c.name != "flex_ep4_float") continue;
    ++tried;
    for (auto op : InstrumentedKernels::kEveryOp) {
      InstrumentedKernels kernels(cpu_kernels());
      kernels.plant_fault(op);
      const CheckProblem p = backend_problem(c, kernels);
      EXPECT_FALSE(check_inproc(p, oracle_step(p)).pass()) << c.name << ": a fault in operation " << op
                                                           << " went unnoticed";
    }
  }
  EXPECT_EQ(tried, 2);
}

}  // namespace
}  // namespace moe::dist

namespace moe::dist {
namespace {

// The clamp case must exercise the clamp: its oracle differs from the same problem without one.
TEST(KernelBackendCases, TheClampCaseClamps) {
  for (const BackendCase& c : kernel_backend_cases()) {
    if (c.name != "clamp_active_gate_latent") continue;
    CheckProblem p = backend_problem(c, cpu_kernels());
    const double clamped = oracle_step(p).objective;
    p.config.layer.swiglu_clamp.reset();
    p.config.layer.shared_expert_clamp = false;
    EXPECT_GT(std::abs(oracle_step(p).objective - clamped), 1e-9);
    return;
  }
  FAIL() << "no clamp case";
}

}  // namespace
}  // namespace moe::dist
