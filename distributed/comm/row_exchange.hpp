// An alltoallv of matrix rows picked by index on both sides (Communicator::alltoallv_indexed). A dispatcher's
// rows then cross between ranks once: the permute is fused into the send (rows are read where the tokens lie) and
// the unpermute into the receive (rows land, or are summed, straight into their token rows). The in-process
// backend does exactly that, reading its peers' rows in place; a backend without shared memory packs, runs its
// plain alltoallv and lands (the default, run_indexed_alltoallv in communicator.cpp).
//
// Buffers are row-major matrices of `width` elements per row. One side of the exchange is a RowBlocks: how many
// rows go to (or come from) each peer, and which row of the buffer each one is, peer after peer.
#pragma once

#include "distributed/comm/collective_call.hpp"
#include "distributed/comm/element_type.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace moe {

struct RowBlocks {
  std::vector<std::int64_t> counts;  // [peers] rows to (or from) each peer
  std::vector<std::int64_t> rows;    // total(counts) buffer rows, peer 0's first
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

// to[i] = from row rows[i], for the n rows listed.
void pack_rows(ElementType type, std::int64_t width, const void* from, std::span<const std::int64_t> rows, void* to);
// Incoming row i (at sources[i]) lands at receive row rows[i], by `landing`; sources in (source rank, position)
// order.
void land_rows(ElementType type, std::int64_t width, std::span<const std::byte* const> sources,
               std::span<const std::int64_t> rows, void* recv, std::int64_t recv_rows, RowLanding landing);
// Receive row rows[i] += the row at sources[i], for i in order. Called on consecutive pieces of one exchange's rows
// in (source, position) order, it sums every receive row in the same order as land_rows, so to the same bits.
void add_rows(ElementType type, std::int64_t width, std::span<const std::byte* const> sources,
              std::span<const std::int64_t> rows, void* recv);

}  // namespace moe
