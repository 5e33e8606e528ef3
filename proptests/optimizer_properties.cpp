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

void require_trajectory_match(bool distributed_optimizer, double clip_grad = 0,
                              OptimizerKind kind = OptimizerKind::sgd) {
  const Scenario s = *scenarios();
  RC_TAG(s.layout.world <= 2 ? "world 1-2" : s.layout.world <= 8 ? "world 3-8" : "world 9-32");
  RC_TAG(s.layout.vpp > 1 ? "interleaved pp" : s.layout.pp > 1 ? "pp" : "no pp");
  const dist::CheckProblem p = make_problem(s);
  dist::RunProblem run;
  run.config = p.config;
  run.params = p.params;
  run.batches = {p.batch};
  run.layout = p.layout;
  run.options = p.options;
  run.tolerance = kind == OptimizerKind::muon ? tolerance(Compared::muon_step, Precision::float64) : p.tolerance;
  run.optimizer.config.kind = kind;
  run.optimizer.config.sgd.lr = 1.0;
  run.optimizer.config.muon.lr = 0.01;  // moves of about 0.01 per element: any misplaced piece shows
  run.optimizer.config.adam.lr = 0.1;
  run.optimizer.distributed = distributed_optimizer;
  run.optimizer.config.clip_grad = clip_grad;
  const auto steps = dist::check_run_inproc(run, dist::oracle_trajectory(run));
  RC_ASSERT(steps.size() == 1u);
  if (!steps[0].pass())
    RC_FAIL(std::string(kind == OptimizerKind::muon ? "Muon's"
                        : distributed_optimizer     ? "the distributed optimizer's"
                                                    : "DDP's") +
            " step (" +
            std::string(to_string(p.options.mode)) +
            (clip_grad > 0 ? ", clipped to " + std::to_string(clip_grad) : "") +
            ") differs from the oracle's trajectory; " + report(steps[0]));
  RC_ASSERT(steps[0].errors[static_cast<size_t>(dist::Quantity::parameters)].compared > 0);
}

}  // namespace

MOE_PROPERTY(Optimizer, DdpStepMatchesTrajectory, 60, ()) { require_trajectory_match(false); }

MOE_PROPERTY(Optimizer, DistributedStepMatchesTrajectory, 60, ()) { require_trajectory_match(true); }

// Max norms below and around the tiny models' gradient norms (about 0.05 to 1), so most steps clip.
MOE_PROPERTY(Optimizer, ClippedStepMatchesTrajectory, 150, ()) {
  const bool distributed = *rc::gen::arbitrary<bool>();
  const double clip = *rc::gen::element(0.01, 0.1, 0.5);
  RC_TAG(distributed ? "distributed optimizer" : "DDP");
  require_trajectory_match(distributed, clip);
}

// Muon runs with DDP only; clipping on in half the cases, so its norm over Muon's two groups is compared too.
MOE_PROPERTY(Optimizer, MuonStepMatchesTrajectory, 100, ()) {
  const bool clip = *rc::gen::arbitrary<bool>();
  RC_TAG(clip ? "clipped" : "unclipped");
  require_trajectory_match(false, clip ? 0.1 : 0.0, OptimizerKind::muon);
}

}  // namespace moe::proptest
