// A group of ranks exchanging host buffers: the only way code in distributed/ communicates (docs/architecture.md).
// Backends: InprocWorld (one thread per rank, inproc_world.hpp) and MpiCommunicator (Open MPI,
// mpi_communicator.hpp). This header knows nothing of MPI.
//
// Callers use the typed front-ends (T = double, float, std::int64_t, std::int32_t; spell T out when passing
// vectors: comm.allreduce<double>(v, ReduceOp::sum)). Each describes itself as a CollectiveCall; the backend checks
// the calls of all ranks together (check_calls) before any data moves, so a mismatch throws
// std::invalid_argument on every rank rather than hanging some of them.
//
// Every collective is collective over all ranks of the communicator: each calls it, in the same order. Ranks
// (peers, roots, subgroup lists) are ranks of this communicator; for the world they are the global ranks.
// Semantics are MPI's, counted in elements:
//   alltoallv        rank r sends send[send_displs[j], +send_counts[j]) to rank j, which stores it at
//                    recv[recv_displs[r], +recv_counts[r]); send_counts[j] on r == recv_counts[r] on j.
//   alltoallv_indexed the same with rows of `width` elements picked by index on both sides (row_exchange.hpp):
//                    rank r sends rows to.rows[block j] of send to rank j, whose k-th row from r lands at row
//                    from.rows[block r][k] of j's recv, copied or added (RowLanding); with groups, a sent row
//                    is the sum of several rows and a received one lands in several (RowBlocks::starts).
//   allgather        recv = send_0 | send_1 | … | send_{size-1}, all sends of one size.
//   allgatherv       rank j's send lands at recv[recv_displs[j], +recv_counts[j]).
//   reduce_scatter   send = size() blocks of recv.size() elements; rank r receives block r reduced over ranks.
//   reduce_scatterv  the same with block sizes recv_counts (identical on every rank), blocks back to back.
//   allreduce        recv = send reduced over ranks.      broadcast: data = data of `root`, on every rank.
//   send / recv      point to point, matched by (source, tag) in send order. send is buffered: it returns at once,
//                    so exchanges cannot deadlock on send. recv blocks until a matching message arrives; its
//                    length must be data.size() (std::invalid_argument otherwise, the message is consumed).
//   split            MPI_Comm_split: ranks passing one color (>= 0) form a sub-communicator ranked by
//                    (key, parent rank).
//   subgroup         every rank passes the list of ranks of its own group (a partition, e.g. the tp or ep groups
//                    of a layout); its new rank is its position in that list.
// Reductions (ReduceOp sum, avg = sum / size() for floating types, max, min) run in rank order
// (rank_order_reduction.hpp), so results are bitwise reproducible and identical on both backends.
// The send and receive buffers of a call must not overlap, except in the in-place forms (allreduce(data, op)).
#pragma once

#include "distributed/comm/collective_call.hpp"
#include "distributed/comm/element_type.hpp"
#include "distributed/comm/row_exchange.hpp"

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace moe {

// Displacements that place blocks of `counts` elements back to back: {0, c0, c0 + c1, …}.
std::vector<std::int64_t> packed_displacements(std::span<const std::int64_t> counts);

class Communicator {
 public:
  // The smallest MPI_TAG_UB MPI allows; both backends accept tags in [0, max_tag].
  static constexpr int max_tag = 32767;

  Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  template <CommElement T>
  void alltoallv(std::span<const T> send, std::span<const std::int64_t> send_counts,
                 std::span<const std::int64_t> send_displs, std::span<T> recv,
                 std::span<const std::int64_t> recv_counts, std::span<const std::int64_t> recv_displs) {
    CollectiveCall c = call<T>(CollectiveKind::alltoallv, send, recv);
    c.send_counts.assign(send_counts.begin(), send_counts.end());
    c.send_displs.assign(send_displs.begin(), send_displs.end());
    c.recv_counts.assign(recv_counts.begin(), recv_counts.end());
    c.recv_displs.assign(recv_displs.begin(), recv_displs.end());
    run_collective(c, send.data(), recv.data());
  }
  // Blocks back to back in rank order on both sides.
  template <CommElement T>
  void alltoallv(std::span<const T> send, std::span<const std::int64_t> send_counts, std::span<T> recv,
                 std::span<const std::int64_t> recv_counts) {
    alltoallv<T>(send, send_counts, packed_displacements(send_counts), recv, recv_counts,
                 packed_displacements(recv_counts));
  }

  // The permute fused into the send and the unpermute into the receive (row_exchange.hpp). Whatever one rank can
  // check alone (counts per peer, rows inside the buffers, no row copied to twice) throws std::invalid_argument on
  // that rank before anything is exchanged; row counts that do not match a peer's throw on every rank.
  template <CommElement T>
  void alltoallv_indexed(std::span<const T> send, const RowBlocks& to, std::span<T> recv, const RowBlocks& from,
                         std::int64_t width, RowLanding landing) {
    exchange_indexed({element_type_of<T>(), width, send.data(), 0, &to, recv.data(), 0, &from, landing}, send.size(),
                     recv.size());
  }

  template <CommElement T>
  void allgather(std::span<const T> send, std::span<T> recv) {
    run_collective(call<T>(CollectiveKind::allgather, send, recv), send.data(), recv.data());
  }

  template <CommElement T>
  void allgatherv(std::span<const T> send, std::span<T> recv, std::span<const std::int64_t> recv_counts,
                  std::span<const std::int64_t> recv_displs) {
    CollectiveCall c = call<T>(CollectiveKind::allgatherv, send, recv);
    c.recv_counts.assign(recv_counts.begin(), recv_counts.end());
    c.recv_displs.assign(recv_displs.begin(), recv_displs.end());
    run_collective(c, send.data(), recv.data());
  }
  // Contributions back to back in rank order.
  template <CommElement T>
  void allgatherv(std::span<const T> send, std::span<T> recv, std::span<const std::int64_t> recv_counts) {
    allgatherv<T>(send, recv, recv_counts, packed_displacements(recv_counts));
  }

  template <CommElement T>
  void reduce_scatter(std::span<const T> send, std::span<T> recv, ReduceOp op) {
    CollectiveCall c = call<T>(CollectiveKind::reduce_scatter, send, recv);
    c.op = op;
    run_collective(c, send.data(), recv.data());
  }

  template <CommElement T>
  void reduce_scatterv(std::span<const T> send, std::span<T> recv, std::span<const std::int64_t> recv_counts,
                       ReduceOp op) {
    CollectiveCall c = call<T>(CollectiveKind::reduce_scatterv, send, recv);
    c.op = op;
    c.recv_counts.assign(recv_counts.begin(), recv_counts.end());
    run_collective(c, send.data(), recv.data());
  }

  template <CommElement T>
  void allreduce(std::span<const T> send, std::span<T> recv, ReduceOp op) {
    CollectiveCall c = call<T>(CollectiveKind::allreduce, send, recv);
    c.op = op;
    run_collective(c, send.data(), recv.data());
  }
  template <CommElement T>
  void allreduce(std::span<T> data, ReduceOp op) {
    CollectiveCall c = in_place_call<T>(CollectiveKind::allreduce, data);
    c.op = op;
    run_collective(c, data.data(), data.data());
  }

  template <CommElement T>
  void broadcast(std::span<T> data, int root) {
    CollectiveCall c = in_place_call<T>(CollectiveKind::broadcast, data);
    c.root = root;
    run_collective(c, data.data(), data.data());
  }

  void barrier();

  template <CommElement T>
  void send(std::span<const T> data, int dest, int tag) {
    check_peer("send", "destination", dest, tag);
    send_bytes(element_type_of<T>(), data.data(), std::int64_t(data.size()), dest, tag);
  }
  template <CommElement T>
  void recv(std::span<T> data, int source, int tag) {
    check_peer("recv", "source", source, tag);
    recv_bytes(element_type_of<T>(), data.data(), std::int64_t(data.size()), source, tag);
  }

  std::unique_ptr<Communicator> split(int color, int key);
  std::unique_ptr<Communicator> subgroup(std::span<const int> ranks) { return run_subgroup(ranks); }

  // Backend interface: what an implementation provides; the typed front-ends above are what callers use.
  // run_collective gets the call of this rank and its buffers (send == recv when call.in_place).
  virtual void run_collective(const CollectiveCall& call, const void* send, void* recv) = 0;
  virtual std::unique_ptr<Communicator> run_split(const CollectiveCall& call) = 0;
  // The default exchanges every rank's list with allgather(v) on host buffers, checks that the lists form a
  // partition and splits; a backend whose buffers live elsewhere (device memory) overrides it.
  virtual std::unique_ptr<Communicator> run_subgroup(std::span<const int> ranks);
  // The default packs the rows, runs the plain alltoallv (run_collective) and lands them; a backend that can read
  // its peers' buffers in place overrides it. Arguments are checked (check_indexed_exchange) before the call.
  virtual void run_indexed_alltoallv(const IndexedExchange& x);
  virtual void send_bytes(ElementType type, const void* data, std::int64_t count, int dest, int tag) = 0;
  virtual void recv_bytes(ElementType type, void* data, std::int64_t count, int source, int tag) = 0;
  // Staging memory for a collective that packs or lands rows: `slot` 0 or 1, at least `bytes`, kept and reused
  // by later calls (grown when too small, contents undefined). A fresh allocation of tens of MiB per call is
  // mapped anew by malloc, and its first touch page-faults on every page: a pass over the rows of its own.
  std::byte* staging(int slot, std::size_t bytes);

 private:
  struct Staging {
    std::unique_ptr<std::byte[]> data;
    std::size_t bytes = 0;
  };
  Staging staging_[2];
  template <CommElement T>
  static CollectiveCall call(CollectiveKind kind, std::span<const T> send, std::span<T> recv) {
    CollectiveCall c;
    c.kind = kind;
    c.type = element_type_of<T>();
    c.send_size = std::int64_t(send.size());
    c.recv_size = std::int64_t(recv.size());
    c.buffers_overlap = overlap(send.data(), send.size_bytes(), recv.data(), recv.size_bytes());
    return c;
  }
  template <CommElement T>
  static CollectiveCall in_place_call(CollectiveKind kind, std::span<T> data) {
    CollectiveCall c;
    c.kind = kind;
    c.type = element_type_of<T>();
    c.send_size = c.recv_size = std::int64_t(data.size());
    c.in_place = true;
    return c;
  }
  // Checks the buffers and rows (filling in the row counts) and runs the exchange.
  void exchange_indexed(IndexedExchange x, std::size_t send_elements, std::size_t recv_elements);
  static bool overlap(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes);
  // Point-to-point arguments are local: a bad peer or tag throws std::invalid_argument on this rank only.
  void check_peer(const char* op, const char* role, int peer, int tag) const;
};

}  // namespace moe
