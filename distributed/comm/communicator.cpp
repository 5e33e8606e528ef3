#include "distributed/comm/communicator.hpp"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

namespace moe {
namespace {

std::string show(std::span<const std::int64_t> ranks) {
  std::string s = "[";
  for (std::size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s + "]";
}

// lists[r] is the group rank r says it belongs to. Valid when every list holds its own rank, only ranks of the
// communicator, no repeats, and every member of a list passes that same list (the lists partition the ranks).
void check_partition(const std::vector<std::span<const std::int64_t>>& lists) {
  const auto n = std::int64_t(lists.size());
  for (std::int64_t r = 0; r < n; ++r) {
    const auto& list = lists[r];
    std::vector<std::int64_t> sorted(list.begin(), list.end());
    std::sort(sorted.begin(), sorted.end());
    const bool in_range = sorted.empty() || (sorted.front() >= 0 && sorted.back() < n);
    if (!in_range || std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end() ||
        !std::binary_search(sorted.begin(), sorted.end(), r)) {
      throw std::invalid_argument("subgroup: rank " + std::to_string(r) + " lists " + show(list) +
                                  " (a list holds the caller's own rank and distinct ranks in [0, " +
                                  std::to_string(n) + "))");
    }
    for (std::int64_t member : list) {
      if (!std::ranges::equal(lists[member], list)) {
        throw std::invalid_argument("subgroup: rank " + std::to_string(r) + " lists " + show(list) +
                                    " but its member rank " + std::to_string(member) + " lists " + show(lists[member]) +
                                    " (every member of a group passes the same list)");
      }
    }
  }
}

}  // namespace

void Communicator::barrier() {
  CollectiveCall c;
  c.kind = CollectiveKind::barrier;
  run_collective(c, nullptr, nullptr);
}

std::unique_ptr<Communicator> Communicator::split(int color, int key) {
  CollectiveCall c;
  c.kind = CollectiveKind::split;
  c.color = color;
  c.key = key;
  return run_split(c);
}

// Every rank sees every list, so every rank reaches the same verdict; the group is then a split with the smallest
// member as color and the position in the list as key.
std::unique_ptr<Communicator> Communicator::run_subgroup(std::span<const int> ranks) {
  const std::vector<std::int64_t> mine(ranks.begin(), ranks.end());
  const std::int64_t length = std::int64_t(mine.size());
  std::vector<std::int64_t> lengths(static_cast<std::size_t>(size()));
  allgather<std::int64_t>(std::span(&length, 1), lengths);
  const std::vector<std::int64_t> displs = packed_displacements(lengths);
  std::vector<std::int64_t> all(std::size_t(displs.back() + lengths.back()));
  allgatherv<std::int64_t>(mine, all, lengths, displs);

  std::vector<std::span<const std::int64_t>> lists;
  for (std::size_t r = 0; r < lengths.size(); ++r) {
    lists.emplace_back(all.data() + displs[r], std::size_t(lengths[r]));
  }
  check_partition(lists);
  const auto at = std::find(mine.begin(), mine.end(), std::int64_t(rank()));
  return split(int(*std::min_element(mine.begin(), mine.end())), int(at - mine.begin()));
}

void Communicator::exchange_indexed(IndexedExchange x, std::size_t send_elements, std::size_t recv_elements) {
  const std::size_t size = element_size(x.type);
  if (x.width >= 1) {
    if (send_elements % std::size_t(x.width) != 0 || recv_elements % std::size_t(x.width) != 0) {
      throw std::invalid_argument("alltoallv_indexed: buffers of " + std::to_string(send_elements) + " and " +
                                  std::to_string(recv_elements) + " elements are not rows of " +
                                  std::to_string(x.width));
    }
    x.send_rows = std::int64_t(send_elements) / x.width;
    x.recv_rows = std::int64_t(recv_elements) / x.width;
  }
  if (overlap(x.send, send_elements * size, x.recv, recv_elements * size))
    throw std::invalid_argument("alltoallv_indexed: the send and receive buffers overlap");
  check_indexed_exchange(x, this->size());
  run_indexed_alltoallv(x);
}

void Communicator::run_indexed_alltoallv(const IndexedExchange& x) {
  const std::size_t row_bytes = std::size_t(x.width) * element_size(x.type);
  const CollectiveCall call = x.as_alltoallv();
  const auto sent = std::size_t(call.send_size / x.width), arriving = std::size_t(call.recv_size / x.width);
  std::byte* packed = staging(0, sent * row_bytes);
  std::byte* arrived = staging(1, arriving * row_bytes);
  pack_rows(x.type, x.width, x.send, *x.to, packed);
  run_collective(call, packed, arrived);
  std::vector<const std::byte*> sources(arriving);
  for (std::size_t i = 0; i < sources.size(); ++i) sources[i] = arrived + i * row_bytes;
  land_rows(x.type, x.width, {sources, {}, x.from->rows, x.from->starts}, x.recv, x.recv_rows, x.landing);
}

std::byte* Communicator::staging(int slot, std::size_t bytes) {
  Staging& s = staging_[slot];
  if (s.bytes < bytes) {
    s.data.reset();  // release first: the old and the new block need not both be held
    // Not value-initialised: zeroing would be a pass over the rows of its own.
    s.data = std::make_unique_for_overwrite<std::byte[]>(bytes);
    s.bytes = bytes;
  }
  return s.data.get();
}

bool Communicator::overlap(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes) {
  if (a_bytes == 0 || b_bytes == 0) return false;
  const auto pa = reinterpret_cast<std::uintptr_t>(a);
  const auto pb = reinterpret_cast<std::uintptr_t>(b);
  return pa < pb + b_bytes && pb < pa + a_bytes;
}

std::vector<std::int64_t> packed_displacements(std::span<const std::int64_t> counts) {
  std::vector<std::int64_t> displs(counts.size());
  std::int64_t at = 0;
  for (std::size_t j = 0; j < counts.size(); ++j) {
    displs[j] = at;
    at += counts[j];
  }
  return displs;
}

void Communicator::check_peer(const char* op, const char* role, int peer, int tag) const {
  if (peer < 0 || peer >= size()) {
    throw std::invalid_argument(std::string(op) + ": " + role + " rank " + std::to_string(peer) + " is outside [0, " +
                                std::to_string(size()) + ")");
  }
  if (tag < 0 || tag > max_tag) {
    throw std::invalid_argument(std::string(op) + ": tag " + std::to_string(tag) + " is outside [0, " +
                                std::to_string(max_tag) + "]");
  }
}

}  // namespace moe
