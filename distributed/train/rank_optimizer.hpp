// The optimizer on one rank. The shard's tensors are flattened into two buffers — non-expert params over dp_cp,
// routed experts over expt_dp (Megatron's dense and expert buffers) — and synchronised by one plan
// (grad_sync.hpp), in one of three forms:
//   DDP (distributed = false): each buffer is all-reduced, and every rank updates its whole shard with its own
//     full copy of the optimizer state;
//   distributed optimizer: each buffer, padded to a multiple of the group size, is reduce-scattered so each rank
//     owns one contiguous slice; the optimizer state exists only for that slice, and the updated slices are
//     all-gathered back into the parameters;
//   GTP (DDP with gtp or egtp > 1): a GTP-sharded buffer (dense weights over gtp, routed experts over expt_gtp) is
//     this rank's permanent shard, a 1/|gtp| slice: the temporary whole wgrad is reduce-scattered over the GTP
//     peers into it, all-reduced over the data-parallel replicas of that shard, the shard (and only its optimizer
//     state) updated, and all-gathered into the whole weights the next step's GEMMs read. Replicated params
//     (router, norms, shared gate) get their own buffer, all-reduced over dp_cp and then gtp.
// The collective is the only difference: pre-scale, SUM over tp and the per-token division are the plan's.
// With clipping on, the synchronised gradients are scaled by one factor from the global norm before any update
// (reference/optimizer.hpp); each parameter enters that norm exactly once whatever the layout:
//   dense       summed over tp and pp; a tp-replicated (sequence-parallel) tensor counted on tp rank 0 only;
//               its dp_cp replicas not at all (DDP), or their disjoint slices summed over dp_cp (distributed);
//   experts     summed over expt_tp, ep and pp; the expt_dp replicas likewise once.
// Muon (reference/muon.hpp) takes every matrix but the embedding and the head: those leave the buffers and move by
// Muon's own all-to-alls (muon_exchange.hpp); what stays in the buffers takes AdamW. Muon runs with DDP only.
#pragma once

#include "distributed/train/grad_sync.hpp"
#include "distributed/train/model_shard.hpp"
#include "distributed/train/muon_exchange.hpp"
#include "distributed/train/rank_groups.hpp"
#include "reference/trajectory.hpp"

#include <memory>
#include <vector>

namespace moe::dist {

struct OptimizerSettings {
  OptimizerConfig config;
  bool distributed = false;
};

// Adam moments of every trained tensor of a shard, whole, in shard_tensors order. Under Muon, m of a Muon matrix is
// its momentum buffer (this rank's piece) and v is zero.
struct ShardMoments {
  OptimizerKind kind = OptimizerKind::adam;  // whose moments (adam or muon) when m is not empty
  std::vector<std::vector<double>> m, v;
  int step = 0;
};

class RankOptimizer {
 public:
  RankOptimizer(const ModelConfig& config, const OptimizerSettings& settings, const ProcessGroups& groups,
                const RankGroups& comms, ModelShard<double>& params, LossMode mode);

  // Synchronises this step's raw gradients (train_step with synchronise = false), clips them when asked, and
  // updates the parameters.
  void step(ModelShard<double>& raw_grads, double global_tokens);
  // The global gradient norm of the last step, before clipping (0 when clipping is off).
  double last_grad_norm() const { return last_grad_norm_; }

  // The moments as whole tensors (all-gathered from the slices when distributed: collective). Empty for SGD.
  ShardMoments moments() const;
  // Installs whole-tensor moments (e.g. from a checkpoint); each rank keeps what it owns.
  void set_moments(const ShardMoments& moments);

 private:
  // One gradient buffer: its tensors (indices into shard_tensors) and the parameter class whose plan it follows.
  struct Buffer {
    std::vector<size_t> tensors;
    ParamClass param_class = ParamClass::dense;
    Communicator* group = nullptr;        // the data-parallel collective's
    Communicator* shard_group = nullptr;  // whose ranks own disjoint slices: group (distributed), the GTP peers, or none
    Eigen::Index size = 0, padded = 0, slice_begin = 0, slice_size = 0;
    std::vector<double> m, v;  // over the slice (with a shard group) or the whole buffer
  };

  std::vector<double> flatten(const Buffer& b, ModelShard<double>& shard) const;
  void unflatten(const Buffer& b, const std::vector<double>& flat, ModelShard<double>& shard) const;
  void update(Buffer& b, double* params, const double* grads, Eigen::Index count, Eigen::Index state_offset);
  // Σ g² of the synchronised buffer gradients over the model (synced[i]: buffer i's whole gradient, or its slice).
  double buffer_grad_squares(const std::vector<std::vector<double>>& synced) const;

  OptimizerSettings settings_;
  ModelShard<double>& params_;
  GradSyncPlan plan_;
  Communicator *tp_, *pp_, *ep_, *expt_tp_;  // the axes a gradient norm sums over
  int step_ = 0;
  double last_grad_norm_ = 0;
  std::vector<Buffer> buffers_;
  std::unique_ptr<MuonExchange> muon_;  // Muon's matrices (null unless the optimizer is Muon)
};

}  // namespace moe::dist
