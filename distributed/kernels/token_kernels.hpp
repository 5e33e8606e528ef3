// Data work of the dispatchers on the CPU: gather, scatter-add and chunk sort of token rows (Eigen + OpenMP).
//
// The dispatchers decide *which* rows go where (host control: split sizes, row indices, chunk orders); these
// kernels only move rows. Each has a fixed order of accumulation, so results do not depend on thread count.
// Row-major [rows, width] matrices: row i is one token (or one token's copy for one expert).
#pragma once

#include "reference/tensor.hpp"

#include <cstdint>
#include <vector>

namespace moe::kernels {

// out[i] = x[rows[i]]: permute (expert-major duplication of tokens) and every other gather of rows.
template <typename T>
Matrix<T> gather_rows(const Matrix<T>& x, const std::vector<std::int64_t>& rows);
// The same into a caller's buffer, resized only when its shape differs: a reused workspace allocates nothing.
template <typename T>
void gather_rows_into(const Matrix<T>& x, const std::vector<std::int64_t>& rows, Matrix<T>& out);

// out[rows[i]] += weight[i] · y[i] (weight empty = 1), in increasing i for each output row: unpermute with
// accumulation, and the backward of gather_rows. `out` must already have its shape.
template <typename T>
void scatter_add_rows(const Matrix<T>& y, const std::vector<std::int64_t>& rows, const std::vector<T>& weight,
                      Matrix<T>& out);

// Chunk c of `x` has split_sizes[c] rows, chunks back to back; the result lists chunks order[0], order[1], …
// (Megatron's sort_chunks_by_idxs).
template <typename T>
Matrix<T> sort_chunks(const Matrix<T>& x, const std::vector<std::int64_t>& split_sizes,
                      const std::vector<std::int64_t>& order);

// The row indices that sort_chunks moves, so that metadata (probabilities, provenance) can follow the rows.
std::vector<std::int64_t> sort_chunks_rows(const std::vector<std::int64_t>& split_sizes,
                                           const std::vector<std::int64_t>& order);

}  // namespace moe::kernels
