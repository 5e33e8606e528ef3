// Properties of one whole optimizer step, for both optimizer paths: the gradient sync plan
// (distributed/train/grad_sync.hpp) with DDP's all-reduce or the distributed optimizer's reduce-scatter of flattened
// buffers, then the update, against the oracle's trajectory (reference/trajectory.hpp).
//
// The update is SGD with learning rate 1, so every parameter moves by exactly its synchronised gradient and a
// scaling error of any size shows in the parameters. (Adam would hide it: m/√v does not change when a whole
// tensor's gradient is scaled.)
//
// With gradient clipping the global norm is compared too ("grad_norm"), so a parameter counted twice or not at all
// shows even where the clip factor stays 1.
//
// Muon (reference/muon.hpp, distributed/train/muon_exchange.hpp) is checked with its own property: Newton–Schulz is
// blind to a gradient's scale, so it tests the other thing that can go wrong — which rank gets which piece of the
// whole matrix — on layouts whose TP and ETP cut matrices into pieces. Momentum and the whole direction are compared
// (the momentum as the optimizer state, "…m").
#include "proptests/differential.hpp"
#include "proptests/generators.hpp"
#include "proptests/property.hpp"

#include <rapidcheck.h>

namespace moe::proptest {
namespace {

// What a trajectory property varies; the rest is drawn.
struct TrajectoryCase {
  bool distributed_optimizer = false;
  double clip_grad = 0;
  OptimizerKind kind = OptimizerKind::sgd;
  bool bf16 = false;
  bool gtp = false;
  int replica_slots = 0;  // replicated experts: a second step, planned by the trainers from the first's counts
};

void require_trajectory_match(const TrajectoryCase& c) {
  ScenarioShape shape;
  shape.gtp = c.gtp;
  shape.replicas = c.replica_slots > 0;
  Scenario s = *scenarios(shape);
  s.config.layer.bf16_storage = c.bf16;
  RC_TAG(s.layout.world <= 2 ? "world 1-2" : s.layout.world <= 8 ? "world 3-8" : "world 9-32");
  RC_TAG(s.layout.vpp > 1 ? "interleaved pp" : s.layout.pp > 1 ? "pp" : "no pp");
  const dist::CheckProblem p = make_problem(s);
  dist::RunProblem run;
  run.config = p.config;
  run.params = p.params;
  run.batches = {p.batch};
  if (c.bf16) run.batches.push_back(p.batch);  // the second step computes with the updated main parameters' copy
  if (c.replica_slots > 0) run.batches.push_back(p.batch);  // the second step replicates what the first counted
  run.layout = p.layout;
  run.options = p.options;
  run.tolerance = c.kind == OptimizerKind::muon ? tolerance(Compared::muon_step, Precision::float64) : p.tolerance;
  run.optimizer.config.kind = c.kind;
  run.optimizer.config.sgd.lr = c.bf16 ? 1e-3 : 1.0;  // bf16: moves below a bf16 ulp, which only main params keep
  run.optimizer.config.muon.lr = 0.01;  // moves of about 0.01 per element: any misplaced piece shows
  run.optimizer.config.adam.lr = 0.1;
  run.optimizer.distributed = c.distributed_optimizer;
  run.optimizer.config.clip_grad = c.clip_grad;
  run.options.hot_expert_slots = c.replica_slots;
  const auto trajectory = dist::oracle_trajectory(run);
  if (c.replica_slots > 0) {
    int planned = 0;  // what the trainers plan for the second step: from the first step's counts
    for (const auto& counts : trajectory.front().bias_counts)
      planned += dist::plan_replicas(counts, s.layout.ep, c.replica_slots).slots();
    RC_TAG(planned > 0 ? "second step replicated" : "nothing to replicate");
  }
  const auto steps = dist::check_run_inproc(run, trajectory);
  RC_ASSERT(steps.size() == run.batches.size());
  for (size_t i = 0; i < steps.size(); ++i) {
    if (!steps[i].pass())
      RC_FAIL(std::string(c.kind == OptimizerKind::muon ? "Muon's"
                          : c.distributed_optimizer   ? "the distributed optimizer's"
                          : c.gtp                     ? "GTP's"
                          : c.replica_slots > 0       ? "DDP's (replicated experts)"
                                                      : "DDP's") +
              " step " + std::to_string(i + 1) + " (" + std::string(to_string(p.options.mode)) +
              (c.clip_grad > 0 ? ", clipped to " + std::to_string(c.clip_grad) : "") +
              (c.bf16 ? ", bf16 storage" : "") +
              ") differs from the oracle's trajectory; " + report(steps[i]));
    RC_ASSERT(steps[i].errors[static_cast<size_t>(dist::Quantity::parameters)].compared > 0);
  }
}

}  // namespace

MOE_PROPERTY(Optimizer, DdpStepMatchesTrajectory, 60, ()) { require_trajectory_match({}); }

MOE_PROPERTY(Optimizer, DistributedStepMatchesTrajectory, 60, ()) {
  require_trajectory_match({.distributed_optimizer = true});
}

// bf16 storage over two steps: each step computes with a bf16 copy of the main parameters and the update lands on
// the main parameters, which keep moves far below a bf16 ulp (lr 1e-3). In double both sides round the same
// values, so they agree to double tolerance; main parameters kept in bf16 differ by up to half an ulp, ~2e-3.
MOE_PROPERTY(Optimizer, Bf16MainParametersMatchTrajectory, 60, ()) {
  const bool distributed = *rc::gen::arbitrary<bool>();
  RC_TAG(distributed ? "distributed optimizer" : "DDP");
  require_trajectory_match({.distributed_optimizer = distributed, .bf16 = true});
}

// Max norms below and around the tiny models' gradient norms (about 0.05 to 1), so most steps clip.
MOE_PROPERTY(Optimizer, ClippedStepMatchesTrajectory, 150, ()) {
  const bool distributed = *rc::gen::arbitrary<bool>();
  const double clip = *rc::gen::element(0.01, 0.1, 0.5);
  RC_TAG(distributed ? "distributed optimizer" : "DDP");
  require_trajectory_match({.distributed_optimizer = distributed, .clip_grad = clip});
}

// GTP: each rank updates its permanent 1/gtp shard of the dense weights (1/egtp of the experts) from the
// reduce-scattered wgrad and all-gathers the whole weights; the clipped norm sums the shards over their GTP peers.
MOE_PROPERTY(Optimizer, GtpStepMatchesTrajectory, 60, ()) {
  const double clip = *rc::gen::element(0.0, 0.1);
  RC_TAG(clip > 0 ? "clipped" : "unclipped");
  require_trajectory_match({.clip_grad = clip, .gtp = true});
}

// Replicated hot experts in whole steps: the trainers plan the second step from the first step's counts (1, 2 or 4
// slots per layer) with no plan exchanged, so EP peers that planned differently would deadlock or mismatch; the
// replicas' wgrad must reach the owners before the optimizer's sync.
MOE_PROPERTY(Optimizer, ReplicatedStepsMatchTrajectory, 60, ()) {
  require_trajectory_match({.replica_slots = *rc::gen::element(1, 2, 4)});
}

// Muon runs with DDP only; clipping on in half the cases, so its norm over Muon's two groups is compared too.
MOE_PROPERTY(Optimizer, MuonStepMatchesTrajectory, 100, ()) {
  const bool clip = *rc::gen::arbitrary<bool>();
  RC_TAG(clip ? "clipped" : "unclipped");
  require_trajectory_match({.clip_grad = clip ? 0.1 : 0.0, .kind = OptimizerKind::muon});
}

}  // namespace moe::proptest
