// The communicators of one rank: every process group of its layout (reference/process_groups) as a
// sub-communicator of the world. Building them is collective: every rank of the world constructs its RankGroups
// together, in the same order.
#pragma once

#include "distributed/comm/communicator.hpp"
#include "distributed/dispatch/dispatcher.hpp"
#include "distributed/train/router_statistics.hpp"
#include "reference/process_groups.hpp"

#include <memory>

namespace moe::dist {

struct RankGroups {
  int rank = 0;  // in the world
  std::unique_ptr<Communicator> tp, cp, dp, dp_cp, tp_cp, tp_dp_cp, pp, ep, expt_tp, tp_ep, expt_dp;
  // expt_tp × expt_dp: the ranks holding pieces or replicas of the same experts (Muon's expert group)
  std::unique_ptr<Communicator> expt_tp_dp;
  // The GTP rematerialisation axes (one rank each when gtp = egtp = 1): the peers that share a weight's shards.
  std::unique_ptr<Communicator> gtp, expt_gtp;

  RankGroups(Communicator& world, const ProcessGroups& groups);

  DispatchGroups dispatch() const { return {ep.get(), expt_tp.get(), tp_ep.get()}; }
  StatisticGroups statistics() const { return {tp_cp.get(), tp_dp_cp.get()}; }
};

// The members of `rank`'s expt_tp × expt_dp group, in ascending world rank.
std::vector<int> expt_tp_dp_members(const ProcessGroups& groups, int rank);

}  // namespace moe::dist
