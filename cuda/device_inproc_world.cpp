#include "cuda/device_inproc_world.hpp"

#include "cuda/cuda_error.hpp"
#include "cuda/device_buffer.hpp"
#include "distributed/comm/inproc_world.hpp"

#include <vector>

namespace moe::cuda {

HostStagedCommunicator::HostStagedCommunicator(Communicator& host, int device) : host_(&host), device_(device) {}

HostStagedCommunicator::HostStagedCommunicator(std::unique_ptr<Communicator> host, int device)
    : owned_(std::move(host)), host_(owned_.get()), device_(device) {}

void HostStagedCommunicator::run_collective(const CollectiveCall& call, const void* send, void* recv) {
  MOE_CUDA_CHECK(cudaSetDevice(device_));
  const std::size_t es = element_size(call.type);
  std::vector<std::byte> host_recv(std::size_t(call.recv_size) * es);
  if (recv != nullptr) copy_to_host(host_recv.data(), recv, host_recv.size());
  if (call.in_place) {
    host_->run_collective(call, host_recv.data(), host_recv.data());
  } else {
    std::vector<std::byte> host_send(std::size_t(call.send_size) * es);
    if (send != nullptr) copy_to_host(host_send.data(), send, host_send.size());
    host_->run_collective(call, host_send.data(), host_recv.data());
  }
  if (recv != nullptr) copy_to_device(recv, host_recv.data(), host_recv.size());
}

std::unique_ptr<Communicator> HostStagedCommunicator::run_split(const CollectiveCall& call) {
  auto host = host_->run_split(call);
  if (host == nullptr) return nullptr;
  return std::make_unique<HostStagedCommunicator>(std::move(host), device_);
}

std::unique_ptr<Communicator> HostStagedCommunicator::run_subgroup(std::span<const int> ranks) {
  auto host = host_->subgroup(ranks);
  if (host == nullptr) return nullptr;
  return std::make_unique<HostStagedCommunicator>(std::move(host), device_);
}

void HostStagedCommunicator::send_bytes(ElementType type, const void* data, std::int64_t count, int dest, int tag) {
  MOE_CUDA_CHECK(cudaSetDevice(device_));
  std::vector<std::byte> host(std::size_t(count) * element_size(type));
  copy_to_host(host.data(), data, host.size());
  host_->send_bytes(type, host.data(), count, dest, tag);
}

void HostStagedCommunicator::recv_bytes(ElementType type, void* data, std::int64_t count, int source, int tag) {
  MOE_CUDA_CHECK(cudaSetDevice(device_));
  std::vector<std::byte> host(std::size_t(count) * element_size(type));
  host_->recv_bytes(type, host.data(), count, source, tag);
  copy_to_device(data, host.data(), host.size());
}

void run_device_ranks(int size, int device, const std::function<void(Communicator&)>& fn) {
  InprocWorld(size, RankExecution::threads).run([&](Communicator& host) {  // a thread per rank, as CUDA expects
    MOE_CUDA_CHECK(cudaSetDevice(device));
    HostStagedCommunicator comm(host, device);
    fn(comm);
  });
}

}  // namespace moe::cuda
