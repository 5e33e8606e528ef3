// The one definition of how a Communicator reduces: element-wise over the ranks' inputs in rank order,
//   out[i] = ((in_0[i] ∘ in_1[i]) ∘ in_2[i]) ∘ … ∘ in_{n-1}[i],   avg: out[i] = sum[i] / n,
// whatever the timing of the ranks and whichever backend moved the data. Both backends call it, so a reduction
// gives the same bits on in-process ranks and under MPI (MPI's own reductions choose their order freely).
#pragma once

#include "distributed/comm/collective_call.hpp"
#include "distributed/comm/element_type.hpp"

#include <cstdint>
#include <span>

namespace moe {

// inputs[r] points at `count` elements of `type` from rank r; out receives `count` elements and may alias
// inputs[0] but no other input.
void reduce_in_rank_order(ElementType type, ReduceOp op, std::span<const void* const> inputs, std::int64_t count,
                          void* out);

}  // namespace moe
