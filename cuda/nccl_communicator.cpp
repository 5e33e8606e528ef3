#include "cuda/nccl_communicator.hpp"

#include "cuda/cuda_error.hpp"
#include "cuda/device_buffer.hpp"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <stdexcept>
#include <string>

namespace moe::cuda {
namespace {

void check_nccl(ncclResult_t status, const char* call) {
  if (status == ncclSuccess) return;
  throw std::runtime_error(std::string("NCCL: ") + call + " failed: " + ncclGetErrorString(status) + " (" +
                           ncclGetLastError(nullptr) + ")");
}
#define MOE_NCCL_CHECK(call) check_nccl((call), #call)

ncclDataType_t nccl_type(ElementType t) {
  switch (t) {
    case ElementType::f64: return ncclFloat64;
    case ElementType::f32: return ncclFloat32;
    case ElementType::i64: return ncclInt64;
    case ElementType::i32: break;
  }
  return ncclInt32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::avg: return ncclAvg;
    case ReduceOp::max: return ncclMax;
    case ReduceOp::min: break;
  }
  return ncclMin;
}

constexpr std::size_t header_bytes = 4 * sizeof(std::int64_t);  // {tag, type, count, unused}

const char* at(const void* base, std::int64_t elements, std::size_t element_bytes) {
  return static_cast<const char*>(base) + std::size_t(elements) * element_bytes;
}
char* at(void* base, std::int64_t elements, std::size_t element_bytes) {
  return static_cast<char*>(base) + std::size_t(elements) * element_bytes;
}

}  // namespace

struct NcclCommunicator::Handles {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  Handles() = default;
  Handles(const Handles&) = delete;
  Handles& operator=(const Handles&) = delete;
  ~Handles() {
    if (comm != nullptr) ncclCommDestroy(comm);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
};

struct NcclCommunicator::Staged {
  std::array<std::int64_t, 4> header{};
  DeviceBuffer<std::byte> bytes;  // header, then payload
};

NcclCommunicator::NcclCommunicator(std::unique_ptr<Handles> handles, int device)
    : handles_(std::move(handles)), device_(device) {
  MOE_NCCL_CHECK(ncclCommUserRank(handles_->comm, &rank_));
  MOE_NCCL_CHECK(ncclCommCount(handles_->comm, &size_));
}

NcclCommunicator::NcclCommunicator(Communicator& bootstrap, int device) : device_(device) {
  static_assert(sizeof(ncclUniqueId) % sizeof(std::int64_t) == 0);
  std::array<std::int64_t, sizeof(ncclUniqueId) / sizeof(std::int64_t)> words{};
  ncclUniqueId id{};
  if (bootstrap.rank() == 0) {
    MOE_NCCL_CHECK(ncclGetUniqueId(&id));
    std::memcpy(words.data(), &id, sizeof id);
  }
  bootstrap.broadcast<std::int64_t>(words, 0);
  std::memcpy(&id, words.data(), sizeof id);
  MOE_CUDA_CHECK(cudaSetDevice(device));
  handles_ = std::make_unique<Handles>();
  MOE_CUDA_CHECK(cudaStreamCreate(&handles_->stream));
  MOE_NCCL_CHECK(ncclCommInitRank(&handles_->comm, bootstrap.size(), id, bootstrap.rank()));
  rank_ = bootstrap.rank();
  size_ = bootstrap.size();
}

std::unique_ptr<NcclCommunicator> NcclCommunicator::single(int device) {
  MOE_CUDA_CHECK(cudaSetDevice(device));
  auto handles = std::make_unique<Handles>();
  MOE_CUDA_CHECK(cudaStreamCreate(&handles->stream));
  MOE_NCCL_CHECK(ncclCommInitAll(&handles->comm, 1, &device));
  return std::unique_ptr<NcclCommunicator>(new NcclCommunicator(std::move(handles), device));
}

// Destructors must not throw: an unmatched send keeps the stream busy forever, so this can only wait.
NcclCommunicator::~NcclCommunicator() {
  if (handles_ != nullptr) {
    cudaSetDevice(device_);
    cudaStreamSynchronize(handles_->stream);
  }
}

void NcclCommunicator::finish() {
  MOE_CUDA_CHECK(cudaStreamSynchronize(handles_->stream));
  in_flight_.clear();
}

// Every rank contributes its encoded call padded to the longest, so one fixed-size allgather moves them all.
void NcclCommunicator::check_with_peers(const CollectiveCall& call) {
  if (size_ == 1) {
    check_calls(std::span(&call, 1));
    return;
  }
  const std::vector<std::int64_t> mine = encode(call);
  const auto n = std::size_t(size_);
  DeviceBuffer<std::int64_t> length(1), lengths(n);
  const std::int64_t my_length = std::int64_t(mine.size());
  length.upload(std::span(&my_length, 1));
  MOE_NCCL_CHECK(ncclAllGather(length.data(), lengths.data(), 1, ncclInt64, handles_->comm, handles_->stream));
  finish();
  const std::vector<std::int64_t> all_lengths = lengths.to_host();
  std::int64_t longest = 0;
  for (auto l : all_lengths) longest = std::max(longest, l);
  std::vector<std::int64_t> padded(std::size_t(longest), 0);
  std::copy(mine.begin(), mine.end(), padded.begin());
  DeviceBuffer<std::int64_t> words(static_cast<std::size_t>(longest)), all_words(n * std::size_t(longest));
  words.upload(padded);
  MOE_NCCL_CHECK(ncclAllGather(words.data(), all_words.data(), std::size_t(longest), ncclInt64, handles_->comm,
                               handles_->stream));
  finish();
  const std::vector<std::int64_t> host = all_words.to_host();
  std::vector<CollectiveCall> calls;
  for (std::size_t r = 0; r < n; ++r)
    calls.push_back(decode(std::span(host.data() + r * std::size_t(longest), std::size_t(all_lengths[r]))));
  check_calls(calls);
}

void NcclCommunicator::run_collective(const CollectiveCall& call, const void* send, void* recv) {
  MOE_CUDA_CHECK(cudaSetDevice(device_));
  check_with_peers(call);
  run_checked(call, send, recv);
  finish();
}

void NcclCommunicator::run_checked(const CollectiveCall& c, const void* send, void* recv) {
  ncclComm_t comm = handles_->comm;
  cudaStream_t stream = handles_->stream;
  const ncclDataType_t type = nccl_type(c.type);
  const std::size_t es = element_size(c.type);
  switch (c.kind) {
    case CollectiveKind::barrier: {
      DeviceBuffer<std::int32_t> token(1);
      token.zero(stream);
      MOE_NCCL_CHECK(ncclAllReduce(token.data(), token.data(), 1, ncclInt32, ncclSum, comm, stream));
      finish();
      return;
    }
    case CollectiveKind::broadcast:
      MOE_NCCL_CHECK(ncclBroadcast(send, recv, std::size_t(c.send_size), type, int(c.root), comm, stream));
      return;
    case CollectiveKind::allreduce:
      MOE_NCCL_CHECK(ncclAllReduce(send, recv, std::size_t(c.send_size), type, nccl_op(c.op), comm, stream));
      return;
    case CollectiveKind::allgather:
      MOE_NCCL_CHECK(ncclAllGather(send, recv, std::size_t(c.send_size), type, comm, stream));
      return;
    case CollectiveKind::reduce_scatter:
      MOE_NCCL_CHECK(ncclReduceScatter(send, recv, std::size_t(c.recv_size), type, nccl_op(c.op), comm, stream));
      return;
    case CollectiveKind::allgatherv: {
      // Rank j's contribution is a broadcast rooted at j into its place in every receive buffer.
      MOE_NCCL_CHECK(ncclGroupStart());
      for (int j = 0; j < size_; ++j) {
        const auto count = c.recv_counts[std::size_t(j)];
        if (count > 0)
          MOE_NCCL_CHECK(ncclBroadcast(send, at(recv, c.recv_displs[std::size_t(j)], es), std::size_t(count), type, j,
                                       comm, stream));
      }
      MOE_NCCL_CHECK(ncclGroupEnd());
      return;
    }
    case CollectiveKind::reduce_scatterv: {
      // Block j is a reduce rooted at j; blocks lie back to back in the send buffer.
      MOE_NCCL_CHECK(ncclGroupStart());
      std::int64_t offset = 0;
      for (int j = 0; j < size_; ++j) {
        const auto count = c.recv_counts[std::size_t(j)];
        if (count > 0)
          MOE_NCCL_CHECK(ncclReduce(at(send, offset, es), recv, std::size_t(count), type, nccl_op(c.op), j, comm,
                                    stream));
        offset += count;
      }
      MOE_NCCL_CHECK(ncclGroupEnd());
      return;
    }
    case CollectiveKind::alltoallv: {
      const auto self = std::size_t(rank_);
      if (c.send_counts[self] > 0)
        MOE_CUDA_CHECK(cudaMemcpyAsync(at(recv, c.recv_displs[self], es), at(send, c.send_displs[self], es),
                                       std::size_t(c.send_counts[self]) * es, cudaMemcpyDeviceToDevice, stream));
      MOE_NCCL_CHECK(ncclGroupStart());
      for (int j = 0; j < size_; ++j) {
        const auto p = std::size_t(j);
        if (j == rank_) continue;
        if (c.send_counts[p] > 0)
          MOE_NCCL_CHECK(ncclSend(at(send, c.send_displs[p], es), std::size_t(c.send_counts[p]), type, j, comm, stream));
        if (c.recv_counts[p] > 0)
          MOE_NCCL_CHECK(ncclRecv(at(recv, c.recv_displs[p], es), std::size_t(c.recv_counts[p]), type, j, comm, stream));
      }
      MOE_NCCL_CHECK(ncclGroupEnd());
      return;
    }
    case CollectiveKind::split: break;
  }
  throw std::logic_error("NcclCommunicator: split goes through run_split");
}

std::unique_ptr<Communicator> NcclCommunicator::run_split(const CollectiveCall& call) {
  MOE_CUDA_CHECK(cudaSetDevice(device_));
  check_with_peers(call);
  auto handles = std::make_unique<Handles>();
  const int color = call.color >= 0 ? int(call.color) : NCCL_SPLIT_NOCOLOR;
  MOE_NCCL_CHECK(ncclCommSplit(handles_->comm, color, int(call.key), &handles->comm, nullptr));
  if (handles->comm == nullptr) return nullptr;  // NCCL_SPLIT_NOCOLOR: this rank joins no group
  MOE_CUDA_CHECK(cudaStreamCreate(&handles->stream));
  return std::unique_ptr<Communicator>(new NcclCommunicator(std::move(handles), device_));
}

// The host backends exchange the lists to check that they partition the ranks; that exchange needs host buffers,
// so here only this rank's own list is checked, and split's call check makes the ranks agree on the call itself.
void NcclCommunicator::run_indexed_alltoallv(const IndexedExchange&) {
  throw std::invalid_argument(
      "alltoallv_indexed: not available on NcclCommunicator (its buffers are in device memory; pack the rows with "
      "the device token kernels and use alltoallv)");
}

std::unique_ptr<Communicator> NcclCommunicator::run_subgroup(std::span<const int> ranks) {
  const auto at = std::find(ranks.begin(), ranks.end(), rank_);
  if (at == ranks.end())
    throw std::invalid_argument("subgroup: rank " + std::to_string(rank_) + " is not in the list it passed");
  return split(*std::min_element(ranks.begin(), ranks.end()), int(at - ranks.begin()));
}

// The header and the payload are two NCCL messages, posted one after the other like the receiver's two recvs.
void NcclCommunicator::send_bytes(ElementType type, const void* data, std::int64_t count, int dest, int tag) {
  MOE_CUDA_CHECK(cudaSetDevice(device_));
  const std::size_t payload = std::size_t(count) * element_size(type);
  auto m = std::make_unique<Staged>();
  m->header = {tag, std::int64_t(type), count, 0};
  m->bytes = DeviceBuffer<std::byte>(header_bytes + payload);
  cudaStream_t stream = handles_->stream;
  MOE_CUDA_CHECK(cudaMemcpyAsync(m->bytes.data(), m->header.data(), header_bytes, cudaMemcpyHostToDevice, stream));
  if (payload > 0)
    MOE_CUDA_CHECK(cudaMemcpyAsync(m->bytes.data() + header_bytes, data, payload, cudaMemcpyDeviceToDevice, stream));
  if (dest == rank_) {
    to_self_.push_back(std::move(m));
    return;
  }
  MOE_NCCL_CHECK(ncclSend(m->bytes.data(), header_bytes, ncclUint8, dest, handles_->comm, stream));
  if (payload > 0)
    MOE_NCCL_CHECK(ncclSend(m->bytes.data() + header_bytes, payload, ncclUint8, dest, handles_->comm, stream));
  in_flight_.push_back(std::move(m));
}

void NcclCommunicator::recv_bytes(ElementType type, void* data, std::int64_t count, int source, int tag) {
  MOE_CUDA_CHECK(cudaSetDevice(device_));
  cudaStream_t stream = handles_->stream;
  std::array<std::int64_t, 4> header{};
  std::unique_ptr<Staged> own;
  DeviceBuffer<std::byte> incoming;
  if (source == rank_) {
    if (to_self_.empty())
      throw std::invalid_argument("recv: rank " + std::to_string(rank_) +
                                  " receives from itself but sent itself nothing (it would wait forever)");
    own = std::move(to_self_.front());
    to_self_.pop_front();
    header = own->header;
  } else {
    DeviceBuffer<std::byte> header_buffer(header_bytes);
    MOE_NCCL_CHECK(ncclRecv(header_buffer.data(), header_bytes, ncclUint8, source, handles_->comm, stream));
    finish();
    copy_to_host(header.data(), header_buffer.data(), header_bytes);
  }
  const bool matches = header[0] == tag && header[1] == std::int64_t(type) && header[2] == count;
  const std::size_t sent_bytes = std::size_t(header[2]) * element_size(ElementType(header[1]));
  if (own != nullptr) {
    if (matches && sent_bytes > 0)
      MOE_CUDA_CHECK(cudaMemcpyAsync(data, own->bytes.data() + header_bytes, sent_bytes, cudaMemcpyDeviceToDevice,
                                     stream));
  } else if (sent_bytes > 0) {
    // A message that does not match is still consumed, as on the other backends.
    if (!matches) incoming = DeviceBuffer<std::byte>(sent_bytes);
    MOE_NCCL_CHECK(ncclRecv(matches ? data : static_cast<void*>(incoming.data()), sent_bytes, ncclUint8, source,
                            handles_->comm, stream));
  }
  finish();
  if (!matches)
    throw std::invalid_argument(
        "recv: the next message from rank " + std::to_string(source) + " has tag " + std::to_string(header[0]) +
        " and " + std::to_string(header[2]) + " " + std::string(element_type_name(ElementType(header[1]))) +
        " elements, but rank " + std::to_string(rank_) + " receives tag " + std::to_string(tag) + " and " +
        std::to_string(count) + " " + std::string(element_type_name(type)) +
        " (NCCL delivers a pair's messages in send order: receive them in that order, each filling its buffer)");
}

}  // namespace moe::cuda
