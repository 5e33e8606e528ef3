#include "distributed/comm/inproc_communicator.hpp"

#include "distributed/comm/rank_order_reduction.hpp"

#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

namespace moe::inproc {
namespace {

// Element offsets into a buffer of elements of `size` bytes.
struct Elements {
  std::size_t size;
  const std::byte* at(const void* base, std::int64_t offset) const {
    return static_cast<const std::byte*>(base) + std::size_t(offset) * size;
  }
  std::byte* at(void* base, std::int64_t offset) const {
    return static_cast<std::byte*>(base) + std::size_t(offset) * size;
  }
  void copy(void* dst, std::int64_t dst_offset, const void* src, std::int64_t src_offset, std::int64_t count) const {
    if (count > 0) std::memcpy(at(dst, dst_offset), at(src, src_offset), std::size_t(count) * size);
  }
};

}  // namespace

InprocCommunicator::InprocCommunicator(std::shared_ptr<Group> group, int rank)
    : group_(std::move(group)), rank_(rank) {}

// Every rank reads its peers' posted send data and writes only its own receive buffer. When peers may still be
// reading this rank's own buffer (must_depart), an in-place result is held back until depart().
void InprocCommunicator::run_collective(const CollectiveCall& call, const void* send, void* recv) {
  const Group::Arrival arrival = group_->arrive(rank_, Post{call, send, recv});
  const std::span<const Post> posts = arrival.posts;
  if (call.kind == CollectiveKind::barrier) return;
  const Elements e{element_size(call.type)};
  const int ranks = size();
  std::vector<std::byte> held_back;  // an in-place result, written after depart()
  switch (call.kind) {
    case CollectiveKind::broadcast:
      if (rank_ != call.root) e.copy(recv, 0, posts[std::size_t(call.root)].send, 0, call.recv_size);
      break;
    case CollectiveKind::allgather:
      for (int j = 0; j < ranks; ++j) e.copy(recv, j * call.send_size, posts[std::size_t(j)].send, 0, call.send_size);
      break;
    case CollectiveKind::allgatherv:
      for (std::size_t j = 0; j < posts.size(); ++j) {
        e.copy(recv, call.recv_displs[j], posts[j].send, 0, call.recv_counts[j]);
      }
      break;
    case CollectiveKind::alltoallv:
      for (std::size_t j = 0; j < posts.size(); ++j) {
        e.copy(recv, call.recv_displs[j], posts[j].send, posts[j].call.send_displs[std::size_t(rank_)],
               call.recv_counts[j]);
      }
      break;
    case CollectiveKind::allreduce:
    case CollectiveKind::reduce_scatter:
    case CollectiveKind::reduce_scatterv: {
      // This rank's block starts at `offset` in every rank's send buffer.
      std::int64_t offset = 0;
      if (call.kind == CollectiveKind::reduce_scatter) offset = rank_ * call.recv_size;
      if (call.kind == CollectiveKind::reduce_scatterv) {
        for (int j = 0; j < rank_; ++j) offset += call.recv_counts[std::size_t(j)];
      }
      std::vector<const void*> inputs;
      for (const Post& p : posts) inputs.push_back(e.at(p.send, offset));
      void* out = recv;
      if (call.in_place && arrival.must_depart) {
        held_back.resize(std::size_t(call.recv_size) * e.size);
        out = held_back.data();
      }
      reduce_in_rank_order(call.type, call.op, inputs, call.recv_size, out);
      break;
    }
    case CollectiveKind::barrier:
    case CollectiveKind::split:
      throw std::logic_error("run_collective: " + std::string(collective_name(call.kind)) +
                             " is not a data collective");
  }
  if (arrival.must_depart) group_->depart(rank_, call.kind);
  if (!held_back.empty()) std::memcpy(recv, held_back.data(), held_back.size());
}

// Every rank reads the rows its peers send it where they lie in the peers' buffers: each row is copied (or added)
// once, with no pack and no unpack; a peer's group of rows is summed as it is read.
void InprocCommunicator::run_indexed_alltoallv(const IndexedExchange& x) {
  Post post{x.as_alltoallv(), x.send, x.recv};
  post.send_rows = x.to;
  const Group::Arrival arrival = group_->arrive(rank_, std::move(post));
  const std::size_t row_bytes = std::size_t(x.width) * element_size(x.type);
  std::vector<const std::byte*> sources;
  std::vector<std::int64_t> source_starts{0};  // kept only when some peer sends groups
  bool groups = false;
  for (std::size_t j = 0; j < arrival.posts.size(); ++j) {
    const std::int64_t count = x.from->counts[j];
    if (count == 0) continue;  // a peer that sends nothing at all may already have left
    const Post& peer = arrival.posts[j];
    const RowBlocks& theirs = *peer.send_rows;
    groups = groups || theirs.grouped();
    std::size_t first = 0;
    for (int d = 0; d < rank_; ++d) first += std::size_t(theirs.counts[std::size_t(d)]);
    const auto* base = static_cast<const std::byte*>(peer.send);
    for (std::size_t k = first; k < first + std::size_t(count); ++k) {
      for (const auto r : theirs.group(k)) sources.push_back(base + std::size_t(r) * row_bytes);
      source_starts.push_back(std::int64_t(sources.size()));
    }
  }
  const std::span<const std::int64_t> starts = groups ? std::span<const std::int64_t>(source_starts)
                                                      : std::span<const std::int64_t>{};
  land_rows(x.type, x.width, {sources, starts, x.from->rows, x.from->starts}, x.recv, x.recv_rows, x.landing);
  if (arrival.must_depart) group_->depart(rank_, CollectiveKind::alltoallv);
}

std::unique_ptr<Communicator> InprocCommunicator::run_split(const CollectiveCall& call) {
  auto [group, rank] = group_->split(rank_, call);
  return std::make_unique<InprocCommunicator>(std::move(group), rank);
}

void InprocCommunicator::send_bytes(ElementType type, const void* data, std::int64_t count, int dest, int tag) {
  Message m{type, count, std::vector<std::byte>(std::size_t(count) * element_size(type))};
  if (count > 0) std::memcpy(m.bytes.data(), data, m.bytes.size());
  group_->send(rank_, dest, tag, std::move(m));
}

void InprocCommunicator::recv_bytes(ElementType type, void* data, std::int64_t count, int source, int tag) {
  const Message m = group_->recv(rank_, source, tag);
  if (m.type != type || m.count != count) {
    throw std::invalid_argument("recv: rank " + std::to_string(source) + " sent " + std::to_string(m.count) + " " +
                                std::string(element_type_name(m.type)) + " elements with tag " + std::to_string(tag) +
                                " but rank " + std::to_string(rank_) + " receives " + std::to_string(count) + " " +
                                std::string(element_type_name(type)) +
                                " (a message must fill the receive buffer exactly)");
  }
  if (count > 0) std::memcpy(data, m.bytes.data(), m.bytes.size());
}

}  // namespace moe::inproc
