// DeviceStagedCommunicator: the parallel system's host-side control code over device collectives, the mirror of
// HostStagedCommunicator (device_inproc_world.hpp). Callers pass host buffers, as the dispatchers and the training
// step do today; every collective is staged through device memory and run by a communicator whose buffers live on
// the GPU (NcclCommunicator: `moe-oracle check --backend nccl`):
//   host send → device copy → device collective (NCCL: its ring/tree reductions, its call checks) → host recv.
// The receive buffer is copied up first too, so regions a collective does not write keep their contents.
//   alltoallv_indexed  Communicator's default: rows packed and landed on the host around the staged alltoallv;
//   split / subgroup   both communicators split alike, so the pair stays one world of the same ranks;
//   send / recv        over the host communicator: the Communicator contract has send buffered (it returns at once,
//                      so exchanges cannot deadlock), and NCCL's send waits for the peer's recv on the GPU.
// Slow by design (two copies per call): it proves the collectives in NCCL inside the real system, not their speed.
#pragma once

#include "distributed/comm/communicator.hpp"

#include <memory>

namespace moe::cuda {

class DeviceStagedCommunicator final : public Communicator {
 public:
  // `device_comm` takes device pointers on CUDA device `device`; `host` has the same ranks in the same order and
  // must outlive this communicator (sub-communicators own theirs). Throws std::invalid_argument if they differ.
  DeviceStagedCommunicator(std::unique_ptr<Communicator> device_comm, Communicator& host, int device);
  DeviceStagedCommunicator(std::unique_ptr<Communicator> device_comm, std::unique_ptr<Communicator> host, int device);

  int rank() const override { return device_comm_->rank(); }
  int size() const override { return device_comm_->size(); }
  int device() const { return device_; }

  void run_collective(const CollectiveCall& call, const void* send, void* recv) override;
  std::unique_ptr<Communicator> run_split(const CollectiveCall& call) override;
  std::unique_ptr<Communicator> run_subgroup(std::span<const int> ranks) override;
  void send_bytes(ElementType type, const void* data, std::int64_t count, int dest, int tag) override;
  void recv_bytes(ElementType type, void* data, std::int64_t count, int source, int tag) override;

 private:
  std::unique_ptr<Communicator> device_comm_;
  std::unique_ptr<Communicator> owned_host_;
  Communicator* host_;
  int device_;
};

}  // namespace moe::cuda
