// In-process ranks on device buffers: several ranks on one GPU (NCCL refuses two ranks on one device), for the
// multi-rank differential tests. Each rank is a thread of InprocWorld; its Communicator takes device pointers and
// stages every call through host memory around the thread's in-process communicator:
//   device send → host copy → in-process collective (rank-order reductions, call checks) → host → device recv.
// So results are bitwise those of the in-process backend, and mismatches throw as there. The receive buffer is
// copied down first too, so that regions a collective does not write keep their contents. Slow by design.
#pragma once

#include "distributed/comm/communicator.hpp"

#include <functional>
#include <memory>

namespace moe::cuda {

class HostStagedCommunicator final : public Communicator {
 public:
  // `host` must outlive this communicator; sub-communicators own theirs.
  HostStagedCommunicator(Communicator& host, int device);
  HostStagedCommunicator(std::unique_ptr<Communicator> host, int device);

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }

  void run_collective(const CollectiveCall& call, const void* send, void* recv) override;
  std::unique_ptr<Communicator> run_split(const CollectiveCall& call) override;
  std::unique_ptr<Communicator> run_subgroup(std::span<const int> ranks) override;  // the lists are host data
  void send_bytes(ElementType type, const void* data, std::int64_t count, int dest, int tag) override;
  void recv_bytes(ElementType type, void* data, std::int64_t count, int source, int tag) override;

 private:
  std::unique_ptr<Communicator> owned_;
  Communicator* host_;
  int device_;
};

// Runs fn(comm) on `size` threads, every rank on CUDA device `device`, as InprocWorld::run does.
void run_device_ranks(int size, int device, const std::function<void(Communicator&)>& fn);

}  // namespace moe::cuda
