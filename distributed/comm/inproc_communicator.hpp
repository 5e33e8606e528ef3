// One in-process rank's view of a Group (internal to the in-process backend; users get it from InprocWorld::run).
#pragma once

#include "distributed/comm/communicator.hpp"
#include "distributed/comm/inproc_state.hpp"

#include <memory>

namespace moe::inproc {

class InprocCommunicator final : public Communicator {
 public:
  InprocCommunicator(std::shared_ptr<Group> group, int rank);

  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }

  void run_collective(const CollectiveCall& call, const void* send, void* recv) override;
  void run_indexed_alltoallv(const IndexedExchange& x) override;
  std::unique_ptr<Communicator> run_split(const CollectiveCall& call) override;
  void send_bytes(ElementType type, const void* data, std::int64_t count, int dest, int tag) override;
  void recv_bytes(ElementType type, void* data, std::int64_t count, int source, int tag) override;

 private:
  std::shared_ptr<Group> group_;
  int rank_;
};

}  // namespace moe::inproc
