#include "cuda/device_probe.hpp"

#include <gtest/gtest.h>

#include <vector>

TEST(CudaDeviceProbe, KernelRoundTripOnDevice) {
  if (moe::cuda::visible_device_count() == 0) GTEST_SKIP() << "skipped: no GPU";
  std::vector<double> out(1000, -1.0);
  ASSERT_TRUE(moe::cuda::axpb_roundtrip(static_cast<int>(out.size()), 0.5, 3.0, out.data()));
  for (size_t i = 0; i < out.size(); ++i) EXPECT_EQ(out[i], 0.5 * static_cast<double>(i) + 3.0) << i;
}
