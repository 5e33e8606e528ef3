// The instruction set this binary was compiled for, read from the compiler's predefined macros: benchmarks print it,
// because the same Eigen GEMM runs about 4x faster with AVX-512 than with the portable x86-64 baseline (SSE2), and a
// figure means little without it. MOE_NATIVE (CMakeLists.txt, on by default) builds for the machine's own CPU.
#pragma once

#include <string>

namespace moe::cli {

inline std::string built_isa() {
  std::string isa =
#if defined(__AVX512F__)
      "AVX-512"
#elif defined(__AVX2__)
      "AVX2"
#elif defined(__AVX__)
      "AVX"
#elif defined(__SSE4_2__)
      "SSE4.2"
#elif defined(__x86_64__)
      "SSE2 (the portable x86-64 baseline)"
#elif defined(__aarch64__)
      "AArch64"
#else
      "unknown"
#endif
      ;
#if defined(__FMA__)
  isa += " + FMA";
#endif
  return isa;
}

}  // namespace moe::cli
