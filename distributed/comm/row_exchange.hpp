// An alltoallv of matrix rows picked by index on both sides (Communicator::alltoallv_indexed). A dispatcher's
// rows then cross between ranks once: the permute is fused into the send (rows are read where the tokens lie) and
// the unpermute into the receive (rows land, or are summed, straight into their token rows). The in-process
// backend does exactly that, reading its peers' rows in place; a backend without shared memory packs, runs its
// plain alltoallv and lands (the default, run_indexed_alltoallv in communicator.cpp).
//
// Buffers are row-major matrices of `width` elements per row. One side of the exchange is a RowBlocks: how many
// rows go to (or come from) each peer, and which row of the buffer each one is, peer after peer. Either side may
// group buffer rows: a sent row may be the sum of several buffer rows (a token's expert outputs on one rank,
// combined on their way back), and a received row may land in several buffer rows (a token's copies, one per
// local expert it selected).
#pragma once

#include "distributed/comm/collective_call.hpp"
#include "distributed/comm/element_type.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace moe {

struct RowBlocks {
  std::vector<std::int64_t> counts;  // [peers] rows exchanged with each peer
  std::vector<std::int64_t> rows;    // buffer rows, peer 0's first
  // Empty: exchanged row i is buffer row rows[i]. Otherwise exchanged row i is the group of buffer rows
  // rows[starts[i]], …, rows[starts[i + 1] - 1] (total(counts) + 1 rising offsets from 0, no group empty):
  //   sending, the row sent is their sum, left to right from the first (a group of one sends that row);
  //   receiving (RowLanding::copy only), the arriving row lands in each of them.
  std::vector<std::int64_t> starts{};

  bool grouped() const { return !starts.empty(); }
  // The buffer rows of exchanged row i.
  std::span<const std::int64_t> group(std::size_t i) const {
    return grouped() ? std::span(rows).subspan(std::size_t(starts[i]), std::size_t(starts[i + 1] - starts[i]))
                     : std::span(rows).subspan(i, 1);
  }
};

// copy: each receive row is written by at most one incoming row. add: incoming rows are added to their receive
// row, each receive row taking its rows in (source rank, position) order, left to right onto its current value,
// so a sum is the same bits on every backend.
enum class RowLanding { copy, add };

struct IndexedExchange {
  ElementType type = ElementType::f64;
  std::int64_t width = 0;
  const void* send = nullptr;
  std::int64_t send_rows = 0;  // rows in the send buffer
  const RowBlocks* to = nullptr;
  void* recv = nullptr;
  std::int64_t recv_rows = 0;  // rows in the receive buffer
  const RowBlocks* from = nullptr;
  RowLanding landing = RowLanding::copy;

  // The plain alltoallv of the same rows packed back to back: what the ranks check against each other (a rank
  // sends as many rows to a peer as the peer expects from it).
  CollectiveCall as_alltoallv() const;
};

// The checks one rank can make alone, before any peer is involved; std::invalid_argument names the broken rule.
void check_indexed_exchange(const IndexedExchange& x, int peers);

// Packed row i = exchanged row i of `to` (its buffer row, or the sum of its group), for every row `to` lists.
void pack_rows(ElementType type, std::int64_t width, const void* from, const RowBlocks& to, void* packed);

// The rows arriving at one rank, in (source rank, position) order. Arriving row i is the row at sources[i], or,
// with source_starts, the sum left to right of the rows at sources[source_starts[i]] … sources[source_starts[i+1]-1]
// (a sender's group read in place); it lands at receive row rows[i], or in each of rows[row_starts[i]] …
// rows[row_starts[i+1]-1] (a receiver's group; RowLanding::copy only).
struct Arrivals {
  std::span<const std::byte* const> sources;
  std::span<const std::int64_t> source_starts;  // empty: one source each
  std::span<const std::int64_t> rows;
  std::span<const std::int64_t> row_starts;  // empty: one receive row each
};
void land_rows(ElementType type, std::int64_t width, const Arrivals& in, void* recv, std::int64_t recv_rows,
               RowLanding landing);
// Receive row rows[i] += arriving row i, for i in order (rows ungrouped). Called on consecutive pieces of one
// exchange's rows in (source, position) order, it sums every receive row in the same order as land_rows, so to
// the same bits.
void add_rows(ElementType type, std::int64_t width, const Arrivals& in, void* recv);

}  // namespace moe
