#include "distributed/kernels/token_kernels.hpp"

#include "distributed/kernels/parallel_loop.hpp"

#include <numeric>
#include <stdexcept>
#include <string>

namespace moe::kernels {

template <typename T>
void gather_rows_into(const Matrix<T>& x, const std::vector<std::int64_t>& rows, Matrix<T>& out) {
  const auto n = static_cast<std::int64_t>(rows.size());
  if (out.rows() != n || out.cols() != x.cols()) out.resize(n, x.cols());
  parallel_loop(n, n * x.cols() > 65536, Schedule::equal_chunks,
                [&](std::int64_t i) { out.row(i) = x.row(rows[static_cast<size_t>(i)]); });
}

template <typename T>
Matrix<T> gather_rows(const Matrix<T>& x, const std::vector<std::int64_t>& rows) {
  Matrix<T> out;
  gather_rows_into(x, rows, out);
  return out;
}

template <typename T>
void scatter_add_rows(const Matrix<T>& y, const std::vector<std::int64_t>& rows, const std::vector<T>& weight,
                      Matrix<T>& out) {
  if (static_cast<Eigen::Index>(rows.size()) != y.rows() || (!weight.empty() && weight.size() != rows.size()))
    throw std::invalid_argument("scatter_add_rows: one target row (and weight) per input row");
  // Group the inputs by target row with a stable counting sort: each target then takes its rows in increasing i,
  // the order of the plain sequential loop (so the result is bitwise the same, a deterministic unpermute), and
  // targets can go to different threads.
  const auto targets = static_cast<size_t>(out.rows());
  std::vector<std::int64_t> first(targets + 1, 0), by_target(rows.size());
  for (const auto r : rows) {
    if (r < 0 || static_cast<size_t>(r) >= targets)
      throw std::invalid_argument("scatter_add_rows: target row " + std::to_string(r) + " outside [0, " +
                                  std::to_string(targets) + ")");
    ++first[static_cast<size_t>(r) + 1];
  }
  std::partial_sum(first.begin(), first.end(), first.begin());
  std::vector<std::int64_t> next(first.begin(), first.end() - 1);
  for (size_t i = 0; i < rows.size(); ++i) by_target[static_cast<size_t>(next[static_cast<size_t>(rows[i])]++)] =
      static_cast<std::int64_t>(i);
  const auto n = static_cast<std::int64_t>(targets);
  parallel_loop(n, static_cast<Eigen::Index>(rows.size()) * y.cols() > 65536, Schedule::equal_chunks,
                [&](std::int64_t t) {
                  for (auto j = first[static_cast<size_t>(t)]; j < first[static_cast<size_t>(t) + 1]; ++j) {
                    const auto i = by_target[static_cast<size_t>(j)];
                    if (weight.empty()) out.row(t) += y.row(i);
                    else out.row(t) += weight[static_cast<size_t>(i)] * y.row(i);
                  }
                });
}

std::vector<std::int64_t> sort_chunks_rows(const std::vector<std::int64_t>& split_sizes,
                                           const std::vector<std::int64_t>& order) {
  std::vector<std::int64_t> start(split_sizes.size(), 0);
  for (size_t c = 1; c < split_sizes.size(); ++c) start[c] = start[c - 1] + split_sizes[c - 1];
  std::vector<std::int64_t> rows;
  for (auto c : order) {
    const auto ci = static_cast<size_t>(c);
    for (std::int64_t k = 0; k < split_sizes[ci]; ++k) rows.push_back(start[ci] + k);
  }
  return rows;
}

template <typename T>
Matrix<T> sort_chunks(const Matrix<T>& x, const std::vector<std::int64_t>& split_sizes,
                      const std::vector<std::int64_t>& order) {
  if (std::accumulate(split_sizes.begin(), split_sizes.end(), std::int64_t{0}) != x.rows())
    throw std::invalid_argument("sort_chunks: split sizes must add up to the rows");
  return gather_rows(x, sort_chunks_rows(split_sizes, order));
}

#define MOE_INSTANTIATE_TOKEN_KERNELS(T)                                                                       \
  template Matrix<T> gather_rows<T>(const Matrix<T>&, const std::vector<std::int64_t>&);                       \
  template void gather_rows_into<T>(const Matrix<T>&, const std::vector<std::int64_t>&, Matrix<T>&);             \
  template void scatter_add_rows<T>(const Matrix<T>&, const std::vector<std::int64_t>&, const std::vector<T>&, \
                                    Matrix<T>&);                                                               \
  template Matrix<T> sort_chunks<T>(const Matrix<T>&, const std::vector<std::int64_t>&,                        \
                                    const std::vector<std::int64_t>&);
MOE_INSTANTIATE_TOKEN_KERNELS(double)
MOE_INSTANTIATE_TOKEN_KERNELS(float)

}  // namespace moe::kernels
