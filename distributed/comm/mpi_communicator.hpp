// A Communicator over Open MPI, for runs under mpirun across processes and machines. Semantics as in
// communicator.hpp, identical to InprocWorld's ranks; how MPI is used:
//   - before every collective the ranks exchange their CollectiveCalls (one small allgather) and run check_calls,
//     so a mismatch throws the same std::invalid_argument on every rank instead of truncating or hanging;
//   - allreduce and reduce_scatter(v) move blocks with MPI_Alltoallv and reduce them locally in rank order
//     (MPI_Allreduce may reassociate), which keeps results bitwise equal to the in-process backend;
//   - send is buffered (a copy plus MPI_Isend, completed later), as in-process, so exchanges cannot deadlock on
//     send. recv checks the message length in bytes; MPI cannot tell element types apart, in-process ranks can;
//   - alltoallv_indexed, when every rank is a process on this machine that may read the others' memory (checked
//     once per communicator; MOE_MPI_SINGLE_COPY=0 turns it off), reads each peer's rows where they lie with
//     process_vm_readv (cma_rows.hpp): one copy per row, as in-process. Otherwise it packs, runs MPI_Alltoallv
//     and lands. Added rows are summed in (source, position) order either way;
//   - MPI errors become std::runtime_error (the communicator uses MPI_ERRORS_RETURN);
//   - one thread per process calls it (MPI_THREAD_FUNNELED); OpenMP inside a rank's compute is fine.
// This header hides mpi.h; the world communicator is a duplicate of MPI_COMM_WORLD, so its traffic never matches
// messages of other code in the process.
#pragma once

#include "distributed/comm/communicator.hpp"
#include "distributed/comm/mpi_runtime.hpp"

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace moe {

class MpiCommunicator final : public Communicator {
 public:
  // Collective over MPI_COMM_WORLD: every process constructs one.
  explicit MpiCommunicator(const MpiRuntime& runtime);
  // Waits for this rank's buffered sends to be received, then frees the MPI communicator.
  ~MpiCommunicator() override;

  int rank() const override;
  int size() const override;

  void run_collective(const CollectiveCall& call, const void* send, void* recv) override;
  void run_indexed_alltoallv(const IndexedExchange& x) override;
  std::unique_ptr<Communicator> run_split(const CollectiveCall& call) override;
  void send_bytes(ElementType type, const void* data, std::int64_t count, int dest, int tag) override;
  void recv_bytes(ElementType type, void* data, std::int64_t count, int source, int tag) override;

 private:
  struct State;
  explicit MpiCommunicator(std::unique_ptr<State> state);
  std::vector<std::int64_t> check_with_peers(const CollectiveCall& call, std::span<const std::int64_t> extra = {}) const;
  // Whether alltoallv_indexed may read peers' rows in place; decided collectively on the first call.
  bool single_copy_ready();
  // `peers_sends`: from every rank, its send buffer's address and the buffer rows it sends each rank (1 + size()).
  void read_rows_from_peers(const IndexedExchange& x, std::span<const std::int64_t> peers_sends);
  // The rows a peer sends this rank: its rank, the address of its send buffer, the group size of each row (one for
  // a plain row), the buffer rows of all groups back to back, and the index of its first row in the exchange's
  // receive side.
  struct PeerRows {
    int rank = 0;
    std::uintptr_t base = 0;
    std::span<const std::int64_t> sizes;
    std::span<const std::int64_t> rows;
    std::size_t first = 0;
  };
  void read_from(const PeerRows& peer, const IndexedExchange& x);
  // RowLanding::add of plain rows (AlltoAll's combine): every peer's rows, a range of receive rows at a time.
  void add_by_receive_ranges(std::span<const PeerRows> peers, const IndexedExchange& x);
  void reduce_scatterv(const CollectiveCall& call, const void* send, void* recv,
                       std::span<const std::int64_t> block_sizes) const;
  void allreduce(const CollectiveCall& call, const void* send, void* recv) const;

  std::unique_ptr<State> state_;
};

}  // namespace moe
