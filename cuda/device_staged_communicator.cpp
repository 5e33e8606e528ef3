#include "cuda/device_staged_communicator.hpp"

#include "cuda/cuda_error.hpp"
#include "cuda/device_buffer.hpp"

#include <stdexcept>
#include <string>

namespace moe::cuda {
namespace {

// `bytes` of host memory in a fresh device buffer (none for a null or empty one).
DeviceBuffer<std::byte> staged(const void* host, std::size_t bytes) {
  DeviceBuffer<std::byte> b(host != nullptr ? bytes : 0);
  if (b.size() > 0) copy_to_device(b.data(), host, bytes);
  return b;
}

}  // namespace

DeviceStagedCommunicator::DeviceStagedCommunicator(std::unique_ptr<Communicator> device_comm, Communicator& host,
                                                   int device)
    : device_comm_(std::move(device_comm)), host_(&host), device_(device) {
  if (device_comm_ == nullptr || device_comm_->rank() != host_->rank() || device_comm_->size() != host_->size())
    throw std::invalid_argument(
        "DeviceStagedCommunicator: the device and host communicators must be the same ranks in the same order "
        "(device: " +
        (device_comm_ ? std::to_string(device_comm_->rank()) + " of " + std::to_string(device_comm_->size())
                      : std::string("none")) +
        ", host: " + std::to_string(host_->rank()) + " of " + std::to_string(host_->size()) + ")");
}

DeviceStagedCommunicator::DeviceStagedCommunicator(std::unique_ptr<Communicator> device_comm,
                                                   std::unique_ptr<Communicator> host, int device)
    : DeviceStagedCommunicator(std::move(device_comm), *host, device) {
  owned_host_ = std::move(host);
}

void DeviceStagedCommunicator::run_collective(const CollectiveCall& call, const void* send, void* recv) {
  MOE_CUDA_CHECK(cudaSetDevice(device_));
  const std::size_t es = element_size(call.type);
  const std::size_t recv_bytes = std::size_t(call.recv_size) * es;
  DeviceBuffer<std::byte> device_recv = staged(recv, recv_bytes);
  if (call.in_place) {
    device_comm_->run_collective(call, device_recv.data(), device_recv.data());
  } else {
    const DeviceBuffer<std::byte> device_send = staged(send, std::size_t(call.send_size) * es);
    device_comm_->run_collective(call, device_send.data(), device_recv.data());
  }
  if (device_recv.size() > 0) copy_to_host(recv, device_recv.data(), recv_bytes);
}

std::unique_ptr<Communicator> DeviceStagedCommunicator::run_split(const CollectiveCall& call) {
  auto device_part = device_comm_->run_split(call);
  auto host_part = host_->run_split(call);
  if ((device_part == nullptr) != (host_part == nullptr))
    throw std::logic_error("DeviceStagedCommunicator: split left this rank in a group on one communicator only");
  if (device_part == nullptr) return nullptr;
  return std::make_unique<DeviceStagedCommunicator>(std::move(device_part), std::move(host_part), device_);
}

// The host communicator checks that the lists partition the ranks (it can exchange them); the device one follows.
std::unique_ptr<Communicator> DeviceStagedCommunicator::run_subgroup(std::span<const int> ranks) {
  auto host_part = host_->subgroup(ranks);
  auto device_part = device_comm_->subgroup(ranks);
  return std::make_unique<DeviceStagedCommunicator>(std::move(device_part), std::move(host_part), device_);
}

void DeviceStagedCommunicator::send_bytes(ElementType type, const void* data, std::int64_t count, int dest, int tag) {
  host_->send_bytes(type, data, count, dest, tag);
}

void DeviceStagedCommunicator::recv_bytes(ElementType type, void* data, std::int64_t count, int source, int tag) {
  host_->recv_bytes(type, data, count, source, tag);
}

}  // namespace moe::cuda
