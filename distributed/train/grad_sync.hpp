// Gradient synchronisation: one plan, read from the scaling table (reference/scaling_rules.hpp: grad_sync_table,
// the table `moe-oracle scaling` prints), followed by both optimizer paths. For every tensor of a parameter class:
//   1. SUM over tp for sequence-parallel params (router, norms, shared-expert gate): each TP rank saw other tokens;
//   2. × the class's pre-scale (× 1/|gtp| more for a GTP-sharded class: its reduce-scatter is a mean);
//   3. GTP-sharded classes (dense weights over gtp, routed experts over expt_gtp): SUM over the GTP peers into this
//      rank's shard — a reduce-scatter of the flattened buffer (rank_optimizer.hpp), or an all-reduce standing for
//      that reduce-scatter and the next step's all-gather (synchronise_gradients);
//   4. the data-parallel collective, SUM or AVG, over dp_cp (or expt_dp for routed experts) — an all-reduce in
//      place under DDP, a reduce-scatter of the flattened buffer into this rank's slice under the distributed
//      optimizer;
//   5. replicated classes (router, norms, shared gate) under GTP: all-reduced over gtp, AVG (SUM per-token);
//   6. ÷ the global valid-token count in per-token mode.
// Steps 1, 2 and 6 are linear, so the order only moves rounding; it is fixed here so that the slice a
// reduce-scatter leaves needs nothing but steps 5 and 6. Without GTP axes steps 3 and 5 are identities. The
// seeded gradient-scaling bugs (proptests/seeded_bugs/, patches to grad_sync.cpp) change this plan, so DDP, GTP and
// the distributed optimizer all carry them.
#pragma once

#include "distributed/train/model_shard.hpp"
#include "distributed/train/rank_groups.hpp"

#include <array>
#include <span>

namespace moe::dist {

class GradSyncPlan {
 public:
  // What one parameter class goes through (steps 1–4 above).
  struct ClassSync {
    bool sum_over_tp = false;
    double prescale = 1.0;
    ReduceOp op = ReduceOp::sum;
    Communicator* group = nullptr;  // dp_cp or expt_dp
    double postscale = 1.0;         // × after the collective (1 when correct; a seeded bug changes it)
    bool divide_by_global_tokens = false;
    GtpStep gtp_step = GtpStep::none;
    Communicator* gtp_group = nullptr;  // gtp, or expt_gtp for routed experts

    // Step 3 applies: the class's weights are sharded over GTP peers (more than one).
    bool gtp_sharded() const {
      return gtp_group->size() > 1 &&
             (gtp_step == GtpStep::reduce_scatter_mean || gtp_step == GtpStep::reduce_scatter_sum);
    }
  };

  GradSyncPlan(const ProcessGroups& groups, const RankGroups& comms, LossMode mode, const Semantics& semantics,
               bool distributed_optimizer);

  const ClassSync& of(ParamClass param_class) const { return classes_[static_cast<size_t>(param_class)]; }

  // Steps 1 and 2 on one tensor (collective over tp for sequence-parallel params).
  template <typename T>
  void before_collective(ParamClass param_class, std::span<T> data) const;
  // Steps 5 and 6 on what the collective left (the whole tensor, or this rank's slice of a buffer).
  template <typename T>
  void after_collective(ParamClass param_class, std::span<T> data, double global_tokens) const;

 private:
  const RankGroups& comms_;
  std::array<ClassSync, 3> classes_{};
};

// DDP: the plan with an all-reduce per tensor (step 3 too); every rank ends with the whole synchronised gradient.
template <typename T>
void synchronise_gradients(ModelShard<T>& grads, int first_expert, const GradSyncPlan& plan, double global_tokens);

}  // namespace moe::dist
