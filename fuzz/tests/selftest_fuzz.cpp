// A harness that crashes on purpose, for the ctests that show the replay driver reports a crash: it aborts through
// fuzz::finding on an input starting with "crash", as a real harness does on a broken invariant.
#include "fuzz/fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (moe::fuzz::as_text(data, size).substr(0, 5) == "crash") moe::fuzz::finding("the self-test input");
  return 0;
}
