// A Communicator over NCCL whose buffers live in device memory (the spans carry device pointers; semantics as in
// distributed/comm/communicator.hpp). How NCCL is used:
//   - before every collective the ranks exchange their CollectiveCalls (an allgather of lengths, then of the
//     encoded words) and run check_calls, so a mismatch throws the same std::invalid_argument on every rank;
//   - alltoallv is grouped ncclSend/ncclRecv (the own block by a device copy); allgatherv is one ncclBroadcast
//     per root and reduce_scatterv one ncclReduce per root, each group in one ncclGroupStart/End;
//   - reductions are NCCL's (ring/tree order): equal to the other backends up to reassociation, exact at world
//     size 1 and for integer or dyadic data; avg is ncclAvg;
//   - every call returns after its work has finished on the communicator's stream, so results may be used from
//     any stream; send is staged into a private device buffer and returns at once on the host, but its ncclSend
//     is ungrouped on the communicator's stream, where it waits until the peer posts the matching recv. So two
//     ranks that both send before they receive deadlock on the GPU, and a collective issued after an unmatched
//     send waits for it (fusing pending sends into the next recv's ncclGroup would fix this; it needs two GPUs
//     to test, so it is left for then — the tests here run at world size 1);
//   - NCCL delivers the messages between two ranks in send order and has no tags: each message carries a small
//     header (tag, type, count) and recv throws if the next message is not the one it names;
//   - alltoallv_indexed throws: its default packs and lands rows on the host, which cannot read device memory (a
//     device form would pack with the token kernels; the dispatchers use host communicators, so none needs it);
//   - NCCL refuses two ranks on one GPU: one rank per device (several ranks on one GPU use the host-staged
//     in-process backend, device_inproc_world.hpp).
#pragma once

#include "distributed/comm/communicator.hpp"

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

namespace moe::cuda {

class NcclCommunicator final : public Communicator {
 public:
  // Collective over `bootstrap` (MPI or in-process ranks): rank 0 creates the NCCL id and broadcasts it; this
  // rank then joins with bootstrap.rank() / bootstrap.size() on CUDA device `device`.
  NcclCommunicator(Communicator& bootstrap, int device);
  // A world of one rank on `device`.
  static std::unique_ptr<NcclCommunicator> single(int device);
  // Waits for this rank's outstanding sends, then destroys the NCCL communicator.
  ~NcclCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int device() const { return device_; }

  void run_collective(const CollectiveCall& call, const void* send, void* recv) override;
  std::unique_ptr<Communicator> run_split(const CollectiveCall& call) override;
  std::unique_ptr<Communicator> run_subgroup(std::span<const int> ranks) override;
  void run_indexed_alltoallv(const IndexedExchange& x) override;
  void send_bytes(ElementType type, const void* data, std::int64_t count, int dest, int tag) override;
  void recv_bytes(ElementType type, void* data, std::int64_t count, int source, int tag) override;

 private:
  struct Handles;
  struct Staged;  // a sent message's device copy, kept until the stream has passed its ncclSend
  NcclCommunicator(std::unique_ptr<Handles> handles, int device);
  void check_with_peers(const CollectiveCall& call);
  void run_checked(const CollectiveCall& call, const void* send, void* recv);
  void finish();  // synchronises the stream and frees staged messages that have been sent

  std::unique_ptr<Handles> handles_;
  int device_ = 0;
  int rank_ = 0;
  int size_ = 1;
  std::vector<std::unique_ptr<Staged>> in_flight_;
  std::deque<std::unique_ptr<Staged>> to_self_;  // messages a rank sends itself never go through NCCL
};

}  // namespace moe::cuda
