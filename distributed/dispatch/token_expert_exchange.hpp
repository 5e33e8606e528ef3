// The exchange between token rows and expert rows that the Flex and AllGather dispatchers fuse their local stages
// into (above their size thresholds): token rows go straight into every expert row that holds them, and come back
// as the sum of a token's expert rows on each rank, added into the token at its owner (alltoallv_indexed with
// RowBlocks groups, comm/row_exchange.hpp).
#pragma once

#include "distributed/comm/communicator.hpp"
#include "distributed/comm/row_collectives.hpp"
#include "reference/tensor.hpp"

#include <cstdint>
#include <numeric>
#include <vector>

namespace moe::dist {

// The expert rows of each token row, rising, from `token_row_of` (the token row each expert row holds): expert
// rows of token row g are rows[first[g]], …, rows[first[g + 1] - 1]. A stable counting sort, so a token's rows
// keep the order of a scatter-add over the expert rows.
struct ExpertRowsByToken {
  std::vector<std::int64_t> first, rows;
};

inline ExpertRowsByToken expert_rows_by_token(const std::vector<std::int64_t>& token_row_of, std::int64_t token_rows) {
  ExpertRowsByToken out{std::vector<std::int64_t>(static_cast<std::size_t>(token_rows) + 1, 0),
                        std::vector<std::int64_t>(token_row_of.size())};
  for (const auto g : token_row_of) ++out.first[static_cast<std::size_t>(g) + 1];
  std::partial_sum(out.first.begin(), out.first.end(), out.first.begin());
  std::vector<std::int64_t> next(out.first.begin(), out.first.end() - 1);
  for (std::size_t r = 0; r < token_row_of.size(); ++r)
    out.rows[static_cast<std::size_t>(next[static_cast<std::size_t>(token_row_of[r])]++)] = std::int64_t(r);
  return out;
}

struct TokenExpertExchange {
  RowBlocks token_side;   // this rank's token rows, to each peer
  RowBlocks expert_side;  // the rows from each peer, as the (groups of) rows of this rank's side that hold them
  std::int64_t expert_rows = 0;

  // Each token row, copied into every row of this rank's side that holds it: [expert_rows, w].
  template <typename T>
  Matrix<T> to_experts(Communicator& domain, const Matrix<T>& tokens) const {
    Matrix<T> rows(static_cast<Eigen::Index>(expert_rows), tokens.cols());
    domain.alltoallv_indexed<T>(const_span_of(tokens), token_side, span_of(rows), expert_side, tokens.cols(),
                                RowLanding::copy);
    return rows;
  }
  // The rows of each token on each rank, summed left to right, added into the token in rank order: [tokens, w].
  template <typename T>
  Matrix<T> to_tokens(Communicator& domain, const Matrix<T>& rows, Eigen::Index tokens) const {
    Matrix<T> y = Matrix<T>::Zero(tokens, rows.cols());
    domain.alltoallv_indexed<T>(const_span_of(rows), expert_side, span_of(y), token_side, rows.cols(),
                                RowLanding::add);
    return y;
  }
};

}  // namespace moe::dist
