#include "distributed/train/rank_groups.hpp"

#include "distributed/comm/inproc_world.hpp"

#include <algorithm>
#include <stdexcept>
#include <vector>

namespace moe::dist {

RankGroups::RankGroups(Communicator& world, const ProcessGroups& groups) : rank(world.rank()) {
  if (world.size() != groups.layout().world)
    throw std::invalid_argument("rank groups: the communicator has " + std::to_string(world.size()) +
                                " ranks but the layout's world is " + std::to_string(groups.layout().world));
  auto make = [&](GroupKind kind) {
    const std::vector<int> members = groups.group(kind, rank);
    return world.subgroup(members);
  };
  tp = make(GroupKind::tp);
  cp = make(GroupKind::cp);
  dp = make(GroupKind::dp);
  dp_cp = make(GroupKind::dp_cp);
  tp_cp = make(GroupKind::tp_cp);
  tp_dp_cp = make(GroupKind::tp_dp_cp);
  pp = make(GroupKind::pp);
  ep = make(GroupKind::ep);
  expt_tp = make(GroupKind::expt_tp);
  tp_ep = make(GroupKind::tp_ep);
  expt_dp = make(GroupKind::expt_dp);
  expt_tp_dp = world.subgroup(expt_tp_dp_members(groups, rank));
  gtp = make(GroupKind::gtp);
  expt_gtp = make(GroupKind::expt_gtp);
}

std::vector<int> expt_tp_dp_members(const ProcessGroups& groups, int rank) {
  std::vector<int> members;
  for (int replica : groups.group(GroupKind::expt_dp, rank))
    for (int member : groups.group(GroupKind::expt_tp, replica)) members.push_back(member);
  std::sort(members.begin(), members.end());
  return members;
}

std::uint64_t rank_groups_bytes(const ProcessGroups& groups) {
  // The groups RankGroups builds, each the same size on every rank (rank 0's stand for all).
  std::uint64_t largest = expt_tp_dp_members(groups, 0).size();
  for (GroupKind kind : {GroupKind::tp, GroupKind::cp, GroupKind::dp, GroupKind::dp_cp, GroupKind::tp_cp,
                         GroupKind::tp_dp_cp, GroupKind::pp, GroupKind::ep, GroupKind::expt_tp, GroupKind::tp_ep,
                         GroupKind::expt_dp, GroupKind::gtp, GroupKind::expt_gtp})
    largest = std::max<std::uint64_t>(largest, groups.group(kind, 0).size());
  // Per rank: its member list and the members the split gave it (8 bytes an entry each), its color, key and flags
  // (48 bytes); saturated at 2^64 − 1 for a layout no process could hold.
  const auto world = static_cast<std::uint64_t>(groups.layout().world);
  std::uint64_t bytes = 0;
  if (__builtin_mul_overflow(world, 16 * largest + 48, &bytes)) return UINT64_MAX;
  return bytes;
}

std::uint64_t inproc_world_bytes(const ProcessGroups& groups) {
  // A world too large to be made in process is refused as the world itself would refuse it (run it under mpirun),
  // not as an estimate of memory it could never take.
  InprocWorld::require_size(groups.layout().world);
  const std::uint64_t own = static_cast<std::uint64_t>(groups.layout().world) * InprocWorld::kRankBytes;
  const std::uint64_t gathers = rank_groups_bytes(groups);
  return gathers > UINT64_MAX - own ? UINT64_MAX : gathers + own;
}

}  // namespace moe::dist
