// Collectives on blocks of matrix rows: the shapes the dispatchers speak in. A row-major [rows, width] matrix is
// contiguous by rows, so "rows per peer" becomes "elements per peer" by × width.
#pragma once

#include "distributed/comm/communicator.hpp"
#include "reference/tensor.hpp"

#include <cstdint>
#include <numeric>
#include <span>
#include <vector>

namespace moe::dist {

inline std::int64_t total(const std::vector<std::int64_t>& counts) {
  return std::accumulate(counts.begin(), counts.end(), std::int64_t{0});
}

inline std::vector<std::int64_t> times(const std::vector<std::int64_t>& rows, Eigen::Index width) {
  std::vector<std::int64_t> out(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) out[i] = rows[i] * width;
  return out;
}

template <typename M>
auto span_of(M& m) {
  return std::span(m.data(), static_cast<size_t>(m.size()));
}
template <typename M>
auto const_span_of(const M& m) {
  return std::span(m.data(), static_cast<size_t>(m.size()));
}

// Rows send_rows[j] go to peer j; recv_rows[j] arrive from peer j; blocks back to back in peer order.
template <typename M>
M alltoallv_rows(Communicator& comm, const M& send, const std::vector<std::int64_t>& send_rows,
                 const std::vector<std::int64_t>& recv_rows) {
  M recv(total(recv_rows), send.cols());
  comm.alltoallv<typename M::Scalar>(const_span_of(send), times(send_rows, send.cols()), span_of(recv),
                                     times(recv_rows, send.cols()));
  return recv;
}

// Every peer's rows, in peer order (peer j contributes rows[j]).
template <typename M>
M allgatherv_rows(Communicator& comm, const M& send, const std::vector<std::int64_t>& rows) {
  M recv(total(rows), send.cols());
  comm.allgatherv<typename M::Scalar>(const_span_of(send), span_of(recv), times(rows, send.cols()));
  return recv;
}

// Blocks of rows[j] rows, reduced (summed) over peers; this rank receives block rank().
template <typename M>
M reduce_scatterv_rows(Communicator& comm, const M& send, const std::vector<std::int64_t>& rows) {
  M recv(rows[static_cast<size_t>(comm.rank())], send.cols());
  comm.reduce_scatterv<typename M::Scalar>(const_span_of(send), span_of(recv), times(rows, send.cols()),
                                           ReduceOp::sum);
  return recv;
}

// One count from every peer.
inline std::vector<std::int64_t> allgather_count(Communicator& comm, std::int64_t mine) {
  std::vector<std::int64_t> all(static_cast<size_t>(comm.size()));
  comm.allgather<std::int64_t>(std::span<const std::int64_t>(&mine, 1), all);
  return all;
}

}  // namespace moe::dist
