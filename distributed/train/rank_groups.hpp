// The communicators of one rank: every process group of its layout (reference/process_groups) as a
// sub-communicator of the world. Building them is collective: every rank of the world constructs its RankGroups
// together, in the same order.
#pragma once

#include "distributed/comm/communicator.hpp"
#include "distributed/dispatch/dispatcher.hpp"
#include "distributed/train/router_statistics.hpp"
#include "reference/process_groups.hpp"

#include <cstdint>
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

// Bytes a whole world of in-process ranks holds at once while its ranks build their RankGroups together. Each
// Communicator::subgroup holds the rank's member list and the members the split gave it (16 bytes × group) and the
// split's few words per rank, so the world holds world · group of them: 16 MiB at 1024 ranks in a group spanning the
// world. (Gathering every list on every rank, as subgroup once did, was 8 · world³ bytes: 8.6 GB at 1024 ranks.) An
// upper bound for what it counts: the largest group's, the others being freed before the next.
std::uint64_t rank_groups_bytes(const ProcessGroups& groups);
// What a world of groups.layout().world in-process ranks that build their RankGroups costs besides their tensors:
// each rank's own (InprocWorld::kRankBytes) and rank_groups_bytes. Throws InprocWorld's refusal of a world past
// InprocWorld::kMaxRanks, as making it would.
std::uint64_t inproc_world_bytes(const ProcessGroups& groups);

}  // namespace moe::dist
