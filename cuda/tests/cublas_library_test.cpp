// cuBLAS is loaded on first use (cublas_library.hpp): these run without a GPU, since loading the library and
// asking it for a status string need no device.
#include "cuda/cublas_library.hpp"

#include <gtest/gtest.h>

#include <string>

TEST(CublasLibrary, LoadsOnFirstUseWithEveryEntryPoint) {
  const moe::cuda::CublasLibrary& l = moe::cuda::cublas();
  EXPECT_NE(l.create, nullptr);
  EXPECT_NE(l.destroy, nullptr);
  EXPECT_NE(l.set_stream, nullptr);
  EXPECT_NE(l.set_math_mode, nullptr);
  EXPECT_NE(l.gemm_ex, nullptr);
  ASSERT_NE(l.status_string, nullptr);
  // The loaded function is cuBLAS's own: it knows its status codes.
  EXPECT_EQ(std::string(l.status_string(CUBLAS_STATUS_NOT_INITIALIZED)), "the library was not initialized");
  EXPECT_EQ(&moe::cuda::cublas(), &l) << "loaded once";
}
