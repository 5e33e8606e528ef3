// The named process groups of a layout, and which routed experts each rank holds.
//
// Each group is a token set of one of the two meshes (megatron/core/parallel_state.py: initialize_model_parallel):
//   dense mesh:  tp 'tp', cp 'cp', dp 'dp', dp_cp 'dp-cp', tp_cp 'tp-cp', tp_dp_cp 'tp-gtp_remat-dp-cp', pp 'pp',
//                gtp 'gtp_remat', dp_gtp 'gtp_remat-dp', dp_cp_gtp 'gtp_remat-dp-cp'
//   expert mesh: ep 'ep', expt_tp 'tp', tp_ep 'tp-ep', expt_dp 'dp', expt_gtp 'gtp_remat', expt_dp_gtp 'gtp_remat-dp'
// Who uses which: the dense gradient buffer reduces over dp_cp, the expert buffer over expt_dp (both leave the GTP
// axis out: its peers hold different weight shards); router statistics over tp_cp or tp_dp_cp; the AlltoAll
// dispatcher exchanges over ep, gathers over expt_tp, counts over tp_ep. Under GTP a weight shard is gathered
// over gtp / expt_gtp, and the groups "with gtp" (Megatron's with_gtp_remat=True) hold every rank of distinct data.
#pragma once

#include "reference/parallel_layout.hpp"

#include <string_view>
#include <vector>

namespace moe {

enum class GroupKind {
  tp, cp, dp, dp_cp, tp_cp, tp_dp_cp, pp, gtp, dp_gtp, dp_cp_gtp,  // dense mesh
  ep, expt_tp, tp_ep, expt_dp, expt_gtp, expt_dp_gtp                // expert mesh
};

std::string_view to_string(GroupKind kind);  // Megatron's name, e.g. "expt_dp"
std::vector<GroupKind> all_group_kinds();
bool is_expert_group(GroupKind kind);  // built from the expert mesh

// The routed experts an EP rank holds: global ids first .. first + count - 1 (Megatron: local_expert_indices =
// ep_rank · num_local_experts + i, contiguous).
struct ExpertRange {
  int first = 0;
  int count = 0;
  bool operator==(const ExpertRange&) const = default;
};

// Throws std::invalid_argument unless ep_size divides num_experts.
ExpertRange local_experts(int num_experts, int ep_size, int ep_rank);

struct MoeConfig;
// How a layer's weights split over a layout, the rules every sharded path shares (the parallel system, compare's
// reassembly, the volume model): experts evenly over ep (the placement rule above), each expert's FFN width over
// etp, the shared expert's width over tp. std::invalid_argument naming the sizes.
void check_layer_sharding(const MoeConfig& c, const ParallelLayout& layout);

class ProcessGroups {
 public:
  // Validates the layout (ParallelLayout::validate) and builds its two meshes.
  explicit ProcessGroups(const ParallelLayout& layout);

  const ParallelLayout& layout() const { return layout_; }

  // The group of this kind that contains `rank`, in Megatron's member order.
  std::vector<int> group(GroupKind kind, int rank) const;
  // Every group of this kind, in the order Megatron creates them.
  std::vector<std::vector<int>> all_groups(GroupKind kind) const;
  // The position of `rank` in its group of this kind (its "tp rank", "ep rank", ...).
  int rank_in(GroupKind kind, int rank) const;
  // Routed experts held by `rank`: those of its ep rank (every rank of an expt_tp group holds the same experts).
  ExpertRange experts_of(int rank, int num_experts) const;

 private:
  const RankGenerator& mesh(GroupKind kind) const;

  ParallelLayout layout_;
  RankGenerator dense_;
  RankGenerator expert_;
};

}  // namespace moe
