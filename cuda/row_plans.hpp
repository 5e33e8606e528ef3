// Host-side plans for the device row kernels (token_kernels.hpp): the control part (which rows go where) stays on
// the host, computed by the same functions the CPU backend uses, and travels to the device as index arrays.
#pragma once

#include "cuda/device_buffer.hpp"
#include "cuda/device_context.hpp"

#include <cstdint>
#include <vector>

namespace moe::cuda {

// The gather form of scatter_add_rows(y, rows, ·, out): for each output row o, the input rows i with rows[i] == o
// in increasing i (CSR: sources[offsets[o] .. offsets[o+1])). Throws if a row lies outside [0, out_rows).
struct ScatterPlan {
  std::vector<std::int32_t> offsets;  // [out_rows + 1]
  std::vector<std::int32_t> sources;  // [rows.size()]
};
ScatterPlan make_scatter_plan(const std::vector<std::int64_t>& rows, std::int64_t out_rows);

// Host int64 row indices as the kernels' int32 (throws if one does not fit), and their device copy.
std::vector<std::int32_t> narrow_rows(const std::vector<std::int64_t>& rows);
DeviceBuffer<std::int32_t> upload_rows(const std::vector<std::int64_t>& rows);

// Megatron's sort_chunks_by_idxs on device: out [rows, width] lists the chunks of x in `order`
// (kernels::sort_chunks_rows computes the rows). Enqueued on ctx.stream(); synchronises it before returning,
// because the index array it uploads is freed on return.
template <typename T>
void sort_chunks(const DeviceContext& ctx, const T* x, std::int64_t width, const std::vector<std::int64_t>& split_sizes,
                 const std::vector<std::int64_t>& order, T* out);

}  // namespace moe::cuda
