// A 1024-GPU worked example: N = 1024, PP8, TP1, CP2, EP64, ETP1, so D_a = 64 and EDP = 2.
// The worked examples of the layout, group, scaling and volume tests all start from it.
#pragma once

#include "reference/parallel_layout.hpp"

namespace moe::test {

inline ParallelLayout seed_layout() { return ParallelLayout{.world = 1024, .cp = 2, .pp = 8, .ep = 64}; }

}  // namespace moe::test
