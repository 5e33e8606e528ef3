// A parallel layout: how a world of ranks is folded into the attention (dense) mesh and the expert mesh.
//
// Megatron's MoE Parallel Folding (megatron/core/parallel_state.py: initialize_model_parallel; docs/parallelism.md):
// the same ranks are seen as
//   dense mesh:  world = tp  · cp · dp  · pp · gtp      (dp  = D_a, the attention data parallelism)
//   expert mesh: world = etp · ep · edp · pp · egtp     (edp = D_e, expert data parallelism, "expt_dp")
// dp and edp are derived, never given. EP does not appear in the dense mesh and CP does not appear in the
// expert mesh: tokens of different sequences or context shards regroup freely by expert inside the MoE layer.
// gtp/egtp are the GTP weight-rematerialisation axes (Megatron's gtp_remat and expt gtp_remat): the ranks of one
// gtp group hold distinct data, like dp ranks, but each keeps a 1/gtp shard of the layer weights and gathers the
// rest before a GEMM. So dp counts the replicas of a weight shard and dp·gtp the ranks with distinct data.
// For the objective GTP peers are data-parallel replicas (the oracle splits the batch over dp·gtp); the parallel
// system keeps the shards (distributed/train/rank_optimizer.hpp).
#pragma once

#include "reference/rank_generator.hpp"

#include <map>
#include <string>

namespace moe {

// The largest world a layout may have: every mesh lists its ranks (2^20, far beyond any run).
inline constexpr int kMaxWorld = 1 << 20;

struct ParallelLayout {
  int world = 1;
  int tp = 1;    // tensor parallel (attention, shared expert, dense MLP); sequence parallel uses the same group
  int cp = 1;    // context parallel
  int pp = 1;    // pipeline parallel
  int ep = 1;    // expert parallel
  int etp = 1;   // expert tensor parallel
  int gtp = 1;   // dense GTP rematerialisation axis (gtp_remat in the dense mesh)
  int egtp = 1;  // expert GTP rematerialisation axis (gtp_remat in the expert mesh)
  std::string order = "tp-cp-ep-dp-pp";  // fastest-varying axis first
  int vpp = 1;   // virtual pipeline stages per pp rank (model chunks, run by the interleaved 1F1B schedule)

  int dp() const { return world / (tp * cp * pp * gtp); }
  int edp() const { return world / (etp * ep * pp * egtp); }
  // The ranks of one pipeline stage and CP rank that see distinct samples: Megatron's data-parallel group "with
  // gtp_remat" (batch split, number of microbatches).
  int dp_with_gtp() const { return dp() * gtp; }

  // Throws std::invalid_argument naming the first broken rule of the meshes: sizes >= 1, the divisibility of world
  // by each mesh, the order tokens, equal dp and edp unless the order ends in pp, equal pp groups.
  void validate() const;

  // The orders of the two meshes: `order` with the gtp_remat axis put after tp (dense: GTP peers adjacent) and after
  // ep (expert: EP stays the more local axis), unless `order` names gtp_remat itself (Megatron's
  // _inject_gtp_remat_axis).
  std::string dense_order() const;
  std::string expert_order() const;
  // Megatron's initialize_model_parallel: dense generator (tp, ep = 1, cp, dp, gtp_remat = gtp) and expert
  // generator (etp as tp, ep, cp = 1, edp as dp, gtp_remat = egtp). Call on a validated layout.
  RankGenerator dense_mesh() const;
  RankGenerator expert_mesh() const;
};

// A layout from named sizes, as a user writes one ("cp=2,ep=4", a Python dict): keys world, tp, cp, pp, ep, etp,
// vpp, gtp, egtp, and dp (only to derive world when it is not given: world = tp·cp·pp·gtp·dp); missing sizes are 1.
// Throws std::invalid_argument, `where` first, for an unknown key, a size < 1, a world that is not tp·cp·pp·gtp·dp
// when both are given, and whatever validate() refuses.
ParallelLayout layout_from_sizes(const std::map<std::string, int>& sizes, const std::string& where,
                                 const std::string& order = ParallelLayout().order);

// Number of microbatches per global batch on each pipeline: m = B / (b · dp · gtp). CP, EP and ETP split the work
// of a sample, not the samples, so they do not enter (docs/parallelism.md); GTP peers take distinct samples
// (Megatron: micro_batch_size · data_parallel_size · gtp_weight_remat_size). Throws std::invalid_argument when
// b · dp · gtp does not divide B.
int num_microbatches(const ParallelLayout& layout, int global_batch, int micro_batch);

}  // namespace moe
