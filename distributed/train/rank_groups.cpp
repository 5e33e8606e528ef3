#include "distributed/train/rank_groups.hpp"

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

}  // namespace moe::dist
