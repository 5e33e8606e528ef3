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

// Whether one rank's list can name a group at all: its own rank, distinct ranks of a communicator of n.
bool well_formed(std::span<const std::int64_t> list, std::int64_t r, std::int64_t n) {
  std::vector<std::int64_t> sorted(list.begin(), list.end());
  std::sort(sorted.begin(), sorted.end());
  const bool in_range = sorted.empty() || (sorted.front() >= 0 && sorted.back() < n);
  return in_range && std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end() &&
         std::binary_search(sorted.begin(), sorted.end(), r);
}

// lists[r] is the group rank r says it belongs to. Valid when every list is well formed and every member of a list
// passes that same list (the lists partition the ranks). In O(Σ |list|), not O(Σ |list|²) (a world-sized group of
// 1,024 ranks is 10⁶ steps, not 10⁹): every member of a list has the list's leader (smallest rank) as its own
// leader, and every list equals its leader's, so two members' lists equal the same leader's list.
void check_partition(const std::vector<std::span<const std::int64_t>>& lists) {
  const auto n = std::int64_t(lists.size());
  std::vector<std::int64_t> leader(lists.size());
  for (std::int64_t r = 0; r < n; ++r) {
    const auto& list = lists[r];
    if (!well_formed(list, r, n)) {
      throw std::invalid_argument("subgroup: rank " + std::to_string(r) + " lists " + show(list) +
                                  " (a list holds the caller's own rank and distinct ranks in [0, " +
                                  std::to_string(n) + "))");
    }
    leader[r] = *std::min_element(list.begin(), list.end());
  }
  const auto disagree = [&](std::int64_t r, std::int64_t member) {
    return std::invalid_argument("subgroup: rank " + std::to_string(r) + " lists " + show(lists[r]) +
                                 " but its member rank " + std::to_string(member) + " lists " + show(lists[member]) +
                                 " (every member of a group passes the same list)");
  };
  for (std::int64_t r = 0; r < n; ++r) {
    for (std::int64_t member : lists[r])
      if (leader[member] != leader[r]) throw disagree(r, member);
    if (!std::ranges::equal(lists[leader[r]], lists[r])) throw disagree(r, leader[r]);
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

// Every rank must reach the same verdict, and seeing every list costs each rank O(world · group) memory (8 GB in
// all for 1,024 in-process ranks in one world-sized group). So the lists are exchanged only when something is wrong:
// each rank checks its own list, splits with its smallest member as color and its position as key, and compares its
// list with the members the split actually gave it (an allgather within the group). Two world-wide flags make the
// verdict common; only a broken call pays for the full exchange, whose check names the rank and the lists.
std::unique_ptr<Communicator> Communicator::run_subgroup(std::span<const int> ranks) {
  const std::vector<std::int64_t> mine(ranks.begin(), ranks.end());
  const auto agreed = [this](bool ok) {
    std::int64_t bad = ok ? 0 : 1;
    allreduce<std::int64_t>(std::span(&bad, 1), ReduceOp::max);
    return bad == 0;
  };
  std::unique_ptr<Communicator> group;
  if (agreed(well_formed(mine, rank(), size()))) {
    const auto at = std::find(mine.begin(), mine.end(), std::int64_t(rank()));
    group = split(int(*std::min_element(mine.begin(), mine.end())), int(at - mine.begin()));
    std::vector<std::int64_t> members(std::size_t(group->size()));
    const std::int64_t me = rank();
    group->allgather<std::int64_t>(std::span(&me, 1), members);
    if (agreed(members == mine)) return group;
  }
  // Something is wrong on some rank: every rank exchanges every list and the check says what.
  const std::int64_t length = std::int64_t(mine.size());
  std::vector<std::int64_t> lengths(static_cast<std::size_t>(size()));
  allgather<std::int64_t>(std::span(&length, 1), lengths);
  const std::vector<std::int64_t> displs = packed_displacements(lengths);
  std::vector<std::int64_t> all(std::size_t(displs.back() + lengths.back()));
  allgatherv<std::int64_t>(mine, all, lengths, displs);
  std::vector<std::span<const std::int64_t>> lists;
  for (std::size_t r = 0; r < lengths.size(); ++r) lists.emplace_back(all.data() + displs[r], std::size_t(lengths[r]));
  check_partition(lists);
  throw std::logic_error("subgroup: the split disagreed with lists that partition the ranks");
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
