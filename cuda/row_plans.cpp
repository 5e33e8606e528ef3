#include "cuda/row_plans.hpp"

#include "cuda/bfloat16.hpp"
#include "cuda/token_kernels.hpp"
#include "distributed/kernels/token_kernels.hpp"

#include <numeric>
#include <stdexcept>
#include <string>

namespace moe::cuda {

ScatterPlan make_scatter_plan(const std::vector<std::int64_t>& rows, std::int64_t out_rows) {
  if (rows.size() > 0x7fffffffu || out_rows > 0x7fffffff)
    throw std::invalid_argument("make_scatter_plan: row counts must fit in int32");
  ScatterPlan p{std::vector<std::int32_t>(std::size_t(out_rows) + 1, 0), std::vector<std::int32_t>(rows.size())};
  for (auto r : rows) {
    if (r < 0 || r >= out_rows)
      throw std::invalid_argument("make_scatter_plan: target row " + std::to_string(r) + " outside [0, " +
                                  std::to_string(out_rows) + ")");
    ++p.offsets[std::size_t(r) + 1];
  }
  std::partial_sum(p.offsets.begin(), p.offsets.end(), p.offsets.begin());
  std::vector<std::int32_t> next(p.offsets.begin(), p.offsets.end() - 1);
  for (std::size_t i = 0; i < rows.size(); ++i) p.sources[std::size_t(next[std::size_t(rows[i])]++)] = std::int32_t(i);
  return p;
}

std::vector<std::int32_t> narrow_rows(const std::vector<std::int64_t>& rows) {
  std::vector<std::int32_t> narrow(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] < 0 || rows[i] > 0x7fffffff)
      throw std::invalid_argument("row index " + std::to_string(rows[i]) + " does not fit in int32");
    narrow[i] = std::int32_t(rows[i]);
  }
  return narrow;
}

DeviceBuffer<std::int32_t> upload_rows(const std::vector<std::int64_t>& rows) {
  return DeviceBuffer<std::int32_t>::from_host(narrow_rows(rows));
}

template <typename T>
void sort_chunks(const DeviceContext& ctx, const T* x, std::int64_t width, const std::vector<std::int64_t>& split_sizes,
                 const std::vector<std::int64_t>& order, T* out) {
  const auto rows = upload_rows(kernels::sort_chunks_rows(split_sizes, order));
  gather_rows(ctx.stream(), x, sizeof(T) * std::size_t(width), rows.data(), std::int64_t(rows.size()), 1, out);
  ctx.synchronize();
}

template void sort_chunks<double>(const DeviceContext&, const double*, std::int64_t, const std::vector<std::int64_t>&,
                                  const std::vector<std::int64_t>&, double*);
template void sort_chunks<float>(const DeviceContext&, const float*, std::int64_t, const std::vector<std::int64_t>&,
                                 const std::vector<std::int64_t>&, float*);
template void sort_chunks<bf16>(const DeviceContext&, const bf16*, std::int64_t, const std::vector<std::int64_t>&,
                                const std::vector<std::int64_t>&, bf16*);

}  // namespace moe::cuda
