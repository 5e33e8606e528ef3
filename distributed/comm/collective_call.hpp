// What one rank passes to one collective, without the data: the shape of its buffers, its counts and
// displacements, its root, color or reduce op. Both backends gather the calls of all ranks before any data moves
// and run the same check_calls on them, so a mismatch (different counts, types, roots, or different collectives)
// is reported identically on every rank, and every rank throws instead of some ranks hanging.
//
// Counts, displacements and sizes are in elements. Per-peer vectors have one entry per rank of the communicator
// and are empty for collectives that do not use them:
//   alltoallv       send_counts/send_displs (what goes to each peer), recv_counts/recv_displs (what comes from it)
//   allgatherv      recv_counts/recv_displs (where each peer's contribution lands)
//   reduce_scatterv recv_counts (the block each rank keeps; the send buffer is all blocks back to back)
#pragma once

#include "distributed/comm/element_type.hpp"

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace moe {

enum class CollectiveKind : std::int64_t {
  barrier,
  broadcast,
  allreduce,
  allgather,
  allgatherv,
  reduce_scatter,
  reduce_scatterv,
  alltoallv,
  split,
};

// avg = sum in rank order, then divided by the number of ranks (floating-point types only).
enum class ReduceOp : std::int64_t { sum, avg, max, min };

struct CollectiveCall {
  CollectiveKind kind = CollectiveKind::barrier;
  ElementType type = ElementType::f64;
  ReduceOp op = ReduceOp::sum;   // allreduce, reduce_scatter, reduce_scatterv
  std::int64_t root = 0;         // broadcast
  std::int64_t color = 0;        // split
  std::int64_t key = 0;          // split
  std::int64_t send_size = 0;    // elements in the send buffer (broadcast: the data buffer)
  std::int64_t recv_size = 0;    // elements in the receive buffer
  bool in_place = false;         // the receive buffer is the send buffer (in-place allreduce, broadcast)
  bool buffers_overlap = false;  // send and receive buffers overlap although the call is not in place
  std::vector<std::int64_t> send_counts, send_displs, recv_counts, recv_displs;
};

std::string_view collective_name(CollectiveKind kind);
std::string_view reduce_op_name(ReduceOp op);

// A flat integer form of a call, for backends that exchange calls as messages (MPI). decode(encode(c)) == c;
// decode throws std::invalid_argument on a malformed vector.
std::vector<std::int64_t> encode(const CollectiveCall& call);
CollectiveCall decode(std::span<const std::int64_t> words);

// calls[r] is the call of rank r. Throws std::invalid_argument naming the first broken rule; the same calls give
// the same verdict and message on every rank.
void check_calls(std::span<const CollectiveCall> calls);
// After check_calls on an alltoallv: an indexed exchange checks as the plain alltoallv of its rows, so the ranks
// say which form they run (indexed[r]); throws std::invalid_argument, the same on every rank, when they differ.
void check_same_alltoallv_form(const std::vector<bool>& indexed);

}  // namespace moe
