// Conformance cases for sub-communicators: split (MPI_Comm_split: by color, ranked by key then parent rank) and
// subgroup (explicit lists, ranked by position), shaped like the tp / ep / dp groups of a parallel layout.
// Each checks the new size and rank, the members as the sub-communicator itself sees them, and that a reduction
// inside it reaches exactly those members.
#include "distributed/tests/conformance_support.hpp"

#include <algorithm>
#include <numeric>

namespace moe::conformance {
namespace {

using Ranks = std::vector<std::int64_t>;

// The tensor-parallel width used for the layouts below: 2 when it divides the world, else 1.
int tp_size(int ranks) { return ranks % 2 == 0 ? 2 : 1; }

Tally expect_members(Communicator& sub, int world_rank, const Ranks& want) {
  Tally t{2, 0};
  const auto at = std::find(want.begin(), want.end(), world_rank) - want.begin();
  t.wrong += sub.size() != int(want.size()) ? 1 : 0;
  t.wrong += sub.rank() != int(at) ? 1 : 0;

  const std::int64_t me = world_rank;
  Ranks seen(want.size(), -1);
  if (sub.size() != int(want.size())) return t += Tally{std::int64_t(want.size()), std::int64_t(want.size())};
  sub.allgather<std::int64_t>(std::span(&me, 1), seen);
  t += compare(seen, want);

  Ranks sum{me + 1};
  sub.allreduce<std::int64_t>(std::span(sum), ReduceOp::sum);
  return t += compare(sum, Ranks{std::accumulate(want.begin(), want.end(), std::int64_t(want.size()))});
}

// tp groups: consecutive ranks.
Tally split_tp_case(Communicator& comm) {
  const int r = comm.rank(), tp = tp_size(comm.size());
  auto want = filled<std::int64_t>(tp);
  std::iota(want.begin(), want.end(), std::int64_t(r / tp * tp));
  return expect_members(*comm.split(r / tp, r), r, want);
}

// ep-like strided groups, ranked in reverse by a descending key.
Tally split_reverse_key_case(Communicator& comm) {
  const int r = comm.rank(), tp = tp_size(comm.size());
  Ranks want;
  for (int m = comm.size() - 1; m >= 0; --m) {
    if (m % tp == r % tp) want.push_back(m);
  }
  return expect_members(*comm.split(r % tp, -r), r, want);
}

// Equal keys: the parent's order decides.
Tally split_equal_keys_case(Communicator& comm) {
  const int r = comm.rank();
  Ranks want;
  for (int m = r % 2; m < comm.size(); m += 2) want.push_back(m);
  return expect_members(*comm.split(r % 2, 0), r, want);
}

// A split of a split: halves of the world, then every other rank of a half.
Tally split_nested_case(Communicator& comm) {
  const int r = comm.rank(), ranks = comm.size(), half = (ranks + 1) / 2;
  const int begin = r < half ? 0 : half, end = r < half ? half : ranks;
  auto halves = comm.split(r < half ? 0 : 1, r);
  auto nested = halves->split(halves->rank() % 2, halves->rank());
  Ranks want;
  for (int m = begin; m < end; ++m) {
    if ((m - begin) % 2 == (r - begin) % 2) want.push_back(m);
  }
  return expect_members(*nested, r, want);
}

// Every collective case again, inside the tp groups.
Tally split_collectives_case(Communicator& comm) {
  auto tp = comm.split(comm.rank() / tp_size(comm.size()), comm.rank());
  std::vector<Case> inner;
  add_collective_cases(inner, tp->size());
  Tally t;
  for (const Case& c : inner) t += c.run(*tp);
  return t;
}

// tp groups again, as the explicit lists a rank generator hands out.
Tally subgroup_blocks_case(Communicator& comm) {
  const int r = comm.rank(), tp = tp_size(comm.size());
  auto list = filled<int>(tp);
  std::iota(list.begin(), list.end(), r / tp * tp);
  return expect_members(*comm.subgroup(list), r, Ranks(list.begin(), list.end()));
}

// dp-like strided groups listed in descending order: the position in the list is the new rank.
Tally subgroup_reversed_case(Communicator& comm) {
  const int r = comm.rank(), tp = tp_size(comm.size());
  std::vector<int> list;
  for (int m = comm.size() - 1; m >= 0; --m) {
    if (m % tp == r % tp) list.push_back(m);
  }
  return expect_members(*comm.subgroup(list), r, Ranks(list.begin(), list.end()));
}

// One group of everyone, rotated: rank 1 becomes rank 0.
Tally subgroup_rotated_case(Communicator& comm) {
  auto list = filled<int>(comm.size());
  for (int i = 0; i < comm.size(); ++i) list[std::size_t(i)] = (i + 1) % comm.size();
  return expect_members(*comm.subgroup(list), comm.rank(), Ranks(list.begin(), list.end()));
}

}  // namespace

void add_group_cases(std::vector<Case>& cases, int) {
  cases.push_back({"split.tp", split_tp_case});
  cases.push_back({"split.reverse_key", split_reverse_key_case});
  cases.push_back({"split.equal_keys", split_equal_keys_case});
  cases.push_back({"split.nested", split_nested_case});
  cases.push_back({"split.collectives", split_collectives_case});
  cases.push_back({"subgroup.blocks", subgroup_blocks_case});
  cases.push_back({"subgroup.reversed", subgroup_reversed_case});
  cases.push_back({"subgroup.rotated", subgroup_rotated_case});
}

}  // namespace moe::conformance
