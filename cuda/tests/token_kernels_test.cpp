// Permutation, permute, unpermute (+ backward), ordered scatter-add and chunk sort against the CPU kernels of
// distributed/kernels/token_kernels.hpp. Copies and fixed-order sums must be exact in double and float. Unpermute
// moves 16-byte packs where a row's bytes allow it: double and float run at width 20 (packs) and 21 (one element at
// a time), bf16 at 24 (packs) and 20 (40 bytes: one element at a time).
#include "cuda/device_context.hpp"
#include "cuda/row_plans.hpp"
#include "cuda/tests/gpu_test.hpp"
#include "cuda/token_kernels.hpp"
#include "distributed/kernels/token_kernels.hpp"

#include <numeric>

namespace moe::cuda {
namespace {

using namespace testing;

constexpr int tokens = 29, k = 3, experts = 7, width = 20;

// Each token picks k distinct experts; expert 6 gets nobody so an empty group is covered.
std::vector<std::int32_t> topk_ids() {
  std::vector<std::int32_t> ids;
  for (int t = 0; t < tokens; ++t)
    for (int j = 0; j < k; ++j) ids.push_back(std::int32_t((t * 5 + j * 2) % 6));
  return ids;
}

// The CPU form of the permutation: permuted row → slot, expert-major, tokens ascending within an expert.
std::vector<std::int64_t> cpu_row_slots(const std::vector<std::int32_t>& ids) {
  std::vector<std::int64_t> rows;
  for (int e = 0; e < experts; ++e)
    for (std::size_t s = 0; s < ids.size(); ++s)
      if (ids[s] == e) rows.push_back(std::int64_t(s));
  return rows;
}

template <typename T>
void check_permute_roundtrip(int row_width) {
  SCOPED_TRACE("row width " + std::to_string(row_width));
  const auto ids = topk_ids();
  const auto slots = cpu_row_slots(ids);
  const std::size_t R = slots.size();
  const auto xs = uniform(std::size_t(tokens * row_width), 5), ps = uniform(ids.size(), 6);
  DeviceContext ctx;
  const auto d_ids = upload(ids);
  DeviceBuffer<std::int32_t> row_slot(R), slot_row(R);
  DeviceBuffer<std::int64_t> per_expert(experts);
  build_permutation(ctx.stream(), tokens, k, experts, d_ids.data(), row_slot.data(), slot_row.data(),
                    per_expert.data());
  const auto d_x = upload(cast<T>(xs));
  const auto d_p = upload(cast<Acc<T>>(ps));
  DeviceBuffer<T> permuted(R * row_width), combined(static_cast<std::size_t>(tokens * row_width));
  DeviceBuffer<Acc<T>> permuted_probs(R);
  permute<T>(ctx.stream(), d_x.data(), row_width, tokens, k, row_slot.data(), d_p.data(), permuted.data(),
             permuted_probs.data());
  unpermute<T>(ctx.stream(), permuted.data(), row_width, tokens, k, slot_row.data(), d_p.data(), combined.data());
  ctx.synchronize();

  const auto got_slots = row_slot.to_host();
  for (std::size_t i = 0; i < R; ++i) ASSERT_EQ(got_slots[i], slots[i]) << "permuted row " << i;
  const auto counts = per_expert.to_host();
  for (int e = 0; e < experts; ++e)
    EXPECT_EQ(counts[std::size_t(e)], std::count(ids.begin(), ids.end(), e)) << "expert " << e;

  // Permute is a copy: exact in every type.
  std::vector<std::int64_t> token_rows(R);
  std::vector<Acc<T>> weights(R);
  const auto acc_ps = cast<Acc<T>>(ps);
  for (std::size_t i = 0; i < R; ++i) {
    token_rows[i] = slots[i] / k;
    weights[i] = acc_ps[std::size_t(slots[i])];
  }
  const auto got_permuted = permuted.to_host();
  const auto host_x = cast<T>(xs);
  for (std::size_t i = 0; i < R; ++i)
    for (int c = 0; c < row_width; ++c)
      ASSERT_EQ(as_double(got_permuted[i * row_width + std::size_t(c)]),
                as_double(host_x[std::size_t(token_rows[i] * row_width + c)]));
  expect_close(permuted_probs.to_host(), weights, {0, 0}, "permuted probs");

  // Unpermute: scatter_add_rows over the permuted rows, in their order.
  if constexpr (!std::is_same_v<T, bf16>) {
    Matrix<T> y = Eigen::Map<const Matrix<T>>(got_permuted.data(), Eigen::Index(R), row_width);
    Matrix<T> ref = Matrix<T>::Zero(tokens, row_width);
    kernels::scatter_add_rows<T>(y, token_rows, weights, ref);
    expect_close(combined.to_host(), std::vector<T>(ref.data(), ref.data() + ref.size()), {0, 0}, "unpermute");
  } else {
    std::vector<double> ref(std::size_t(tokens * row_width), 0.0);
    for (std::size_t i = 0; i < R; ++i)
      for (int c = 0; c < row_width; ++c)
        ref[std::size_t(token_rows[i] * row_width + c)] +=
            double(weights[i]) * as_double(got_permuted[i * row_width + std::size_t(c)]);
    expect_close(combined.to_host(), ref, tolerance<T>(), "unpermute bf16");
  }

  // Backward of the weighted unpermute.
  const auto gs = uniform(std::size_t(tokens * row_width), 7);
  const auto d_g = upload(cast<T>(gs));
  DeviceBuffer<T> dy(R * row_width);
  DeviceBuffer<Acc<T>> dprobs(ids.size());
  unpermute_backward<T>(ctx.stream(), d_g.data(), permuted.data(), row_width, tokens, k, slot_row.data(), d_p.data(),
                        dy.data(), dprobs.data());
  ctx.synchronize();
  const auto host_g = cast<T>(gs);
  std::vector<double> ref_dy(R * row_width), ref_dprobs(ids.size(), 0.0);
  for (std::size_t i = 0; i < R; ++i)
    for (int c = 0; c < row_width; ++c) {
      const double g = as_double(host_g[std::size_t(token_rows[i] * row_width + c)]);
      ref_dy[i * row_width + std::size_t(c)] = double(weights[i]) * g;
      ref_dprobs[std::size_t(slots[i])] += g * as_double(got_permuted[i * row_width + std::size_t(c)]);
    }
  expect_close(dy.to_host(), ref_dy, tolerance<T>(), "unpermute backward dy");
  expect_close(dprobs.to_host(), ref_dprobs, tolerance<T>(), "unpermute backward dprobs");
}

TEST(CudaTokenKernels, PermuteUnpermuteDouble) {
  MOE_REQUIRE_GPU();
  for (int w : {width, 21}) check_permute_roundtrip<double>(w);
}
TEST(CudaTokenKernels, PermuteUnpermuteFloat) {
  MOE_REQUIRE_GPU();
  for (int w : {width, 21}) check_permute_roundtrip<float>(w);
}
TEST(CudaTokenKernels, PermuteUnpermuteBf16) {
  MOE_REQUIRE_GPU();
  for (int w : {width, 24}) check_permute_roundtrip<bf16>(w);
}

template <typename T>
void check_scatter_add_and_sort() {
  const int rows = 23, out_rows = 9;
  std::vector<std::int64_t> targets;
  for (int i = 0; i < rows; ++i) targets.push_back((i * 4 + 1) % out_rows);
  const auto ys = uniform(std::size_t(rows * width), 8), os = uniform(std::size_t(out_rows * width), 9),
             ws = uniform(std::size_t(rows), 10);
  const Matrix<T> y = Eigen::Map<const Matrix<double>>(ys.data(), rows, width).cast<T>();
  Matrix<T> ref = Eigen::Map<const Matrix<double>>(os.data(), out_rows, width).cast<T>();
  const auto weights = cast<T>(ws);
  DeviceContext ctx;
  const auto d_y = upload(cast<T>(ys));
  auto d_out = upload(cast<T>(os));
  const auto plan = make_scatter_plan(targets, out_rows);
  const auto d_offsets = upload(plan.offsets), d_sources = upload(plan.sources);
  const auto d_w = upload(weights);
  scatter_add_rows<T>(ctx.stream(), d_y.data(), width, d_offsets.data(), d_sources.data(), d_w.data(), out_rows,
                      d_out.data());
  ctx.synchronize();
  kernels::scatter_add_rows<T>(y, targets, weights, ref);
  expect_close(d_out.to_host(), std::vector<T>(ref.data(), ref.data() + ref.size()), {0, 0}, "scatter_add_rows");

  const std::vector<std::int64_t> splits{4, 0, 7, 3, 9}, order{3, 0, 4, 1, 2};
  const Matrix<T> sorted = kernels::sort_chunks<T>(y, splits, order);
  DeviceBuffer<T> d_sorted(static_cast<std::size_t>(rows * width));
  sort_chunks<T>(ctx, d_y.data(), width, splits, order, d_sorted.data());
  expect_close(d_sorted.to_host(), std::vector<T>(sorted.data(), sorted.data() + sorted.size()), {0, 0},
               "sort_chunks");
}

TEST(CudaTokenKernels, ScatterAddAndChunkSortDouble) {
  MOE_REQUIRE_GPU();
  check_scatter_add_and_sort<double>();
}
TEST(CudaTokenKernels, ScatterAddAndChunkSortFloat) {
  MOE_REQUIRE_GPU();
  check_scatter_add_and_sort<float>();
}

}  // namespace
}  // namespace moe::cuda
