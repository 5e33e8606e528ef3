// Properties of one training step of the whole parallel system (distributed/train_step), each against the
// global step oracle (reference/global_step): forward objective, every synchronised gradient shard and the
// expert-bias update, over generated configs × layouts × dispatchers × scaling paths × microbatching.
#include "proptests/differential.hpp"
#include "proptests/generators.hpp"
#include "proptests/property.hpp"

#include "distributed/comm/inproc_world.hpp"

#include <map>
#include <mutex>

namespace moe::proptest {
namespace {

// The coverage RapidCheck prints with each passing property: world size, whether experts drop, the pipeline.
void tag(const Scenario& s) {
  RC_TAG(s.layout.world <= 2 ? "world 1-2" : s.layout.world <= 8 ? "world 3-8" : "world 9-32");
  RC_TAG(s.config.layer.capacity_factor ? "capacity" : "dropless");
  RC_TAG(s.layout.vpp > 1 ? "interleaved pp" : s.layout.pp > 1 ? "pp" : "no pp");
}

// The layout that splits nothing but the data: dp replicas of one rank each.
ParallelLayout data_parallel_only(const ParallelLayout& l) {
  ParallelLayout d;
  d.world = l.dp();
  return d;
}

}  // namespace

// The core differential property: objective, gradients and bias update equal the oracle on every rank.
MOE_PROPERTY(TrainStep, MatchesGlobalStepOracle, 150, ()) {
  const Scenario s = *scenarios();
  tag(s);
  const dist::CheckProblem p = make_problem(s);
  require_oracle_match(p, dist::oracle_step(p), "the step");
}

// Under a Megatron profile, with padding, the parallel system reproduces that version's numbers: the same
// deviations on both sides (CE per CP rank, local z mean, the shared seq_aux T, per-token aux × local tokens,
// global_aux averaged over dp, padded slots in the bias counts, clamps, the router counting padding), and in a
// third of the cases MTP (its CE per CP rank; per-token, each CP rank's own N_c/Nᵏ_c).
MOE_PROPERTY(TrainStep, MegatronProfileMatchesOracle, 150, ()) {
  ScenarioShape shape;
  shape.megatron = true;
  shape.mtp = *rc::gen::inRange(0, 3) == 0;
  const Scenario s = *scenarios(shape);
  tag(s);
  RC_TAG(s.config.layer.semantics.spec());
  const dist::CheckProblem p = make_problem(s);
  require_oracle_match(p, dist::oracle_step(p), "the step under " + s.config.layer.semantics.spec());
}

// GTP weight rematerialisation: GTP peers take distinct samples; the dense weights' wgrad is reduce-scattered over
// gtp and the routed experts' over expt_gtp (a mean, SUM per-token), the router, norms and shared gate all-reduced
// over gtp. The step equals the oracle's with the batch split over dp·gtp — and, under a Megatron profile in half
// the cases, its routed experts gtp/egtp times the intended gradient where gtp ≠ egtp (gtp-factor-missing).
MOE_PROPERTY(TrainStep, GtpMatchesOracle, 100, ()) {
  ScenarioShape shape;
  shape.gtp = true;
  shape.megatron = *rc::gen::arbitrary<bool>();
  const Scenario s = *scenarios(shape);
  tag(s);
  RC_TAG(s.layout.egtp > 1 ? "egtp 2" : "egtp 1");
  const dist::CheckProblem p = make_problem(s);
  require_oracle_match(p, dist::oracle_step(p), "the step under gtp " + std::to_string(s.layout.gtp) + ", egtp " +
                                                    std::to_string(s.layout.egtp) + ", " +
                                                    s.config.layer.semantics.spec());
}

// Replicated hot experts: plans of 1, 2 or 4 replica slots per layer from the batch's expert counts (the oracle's,
// as a run plans from its previous step's); replicas compute shares of the hot experts' rows with copies of their
// weights and return outputs, input gradients and wgrad. The step equals the unreplicated objective's gradient.
MOE_PROPERTY(TrainStep, ReplicatedExpertsMatchOracle, 100, ()) {
  ScenarioShape shape;
  shape.replicas = true;
  const Scenario s = *scenarios(shape);
  tag(s);
  dist::CheckProblem p = make_problem(s);
  const GlobalStep oracle = dist::oracle_step(p);
  const int slots = *rc::gen::element(1, 2, 4);
  int used = 0;
  for (const auto& counts : oracle.bias_counts) {
    p.options.replication.push_back(dist::plan_replicas(counts, s.layout.ep, slots));
    used += p.options.replication.back().slots();
  }
  RC_TAG(used > 0 ? "replicated" : "nothing to replicate");
  require_oracle_match(p, oracle, "the step with " + std::to_string(used) + " replica slots");
}

// Wave-scheduled EP: the routed experts in 2–4 waves (at most the local experts), each wave's compute on a worker
// thread while the next wave is dispatched and the previous one combined. The step matches the oracle and is bitwise
// the unwaved AlltoAll step: every objective and gradient bit on every rank.
MOE_PROPERTY(TrainStep, WavedExpertsBitwiseUnwaved, 100, ()) {
  ScenarioShape shape;
  shape.waves = true;
  shape.dispatcher = dist::DispatcherKind::alltoall;
  const Scenario s = *scenarios(shape);
  tag(s);
  const int local = s.config.layer.num_experts / s.layout.ep;
  dist::CheckProblem waved = make_problem(s);
  waved.options.expert_waves = *rc::gen::inRange(2, std::min(local, 4) + 1);
  RC_TAG(std::to_string(waved.options.expert_waves) + " waves", s.layout.ep > 1 ? "ep 2+" : "ep 1");
  const std::string what = "the step in " + std::to_string(waved.options.expert_waves) + " waves";
  require_oracle_match(waved, dist::oracle_step(waved), what);
  require_bitwise_equal(waved, make_problem(s), what + " against the unwaved step");
}

// SUM and AVG synchronise the same objective; without padding the per-token objective is the same function
// too (every microbatch has N/(dp·m) valid tokens). All three must give the SUM oracle's numbers.
MOE_PROPERTY(TrainStep, SumEqualsAvgEqualsPerToken, 60, ()) {
  ScenarioShape shape;
  shape.mode = LossMode::sum;
  shape.no_padding = true;
  const Scenario s = *scenarios(shape);
  tag(s);
  dist::CheckProblem p = make_problem(s);
  const GlobalStep oracle = dist::oracle_step(p);
  for (LossMode mode : {LossMode::sum, LossMode::avg, LossMode::per_token}) {
    p.options.mode = mode;
    require_oracle_match(p, oracle, std::string(to_string(mode)) + " against the sum oracle");
  }
}

// The dispatcher moves tokens; it must not change a single number beyond reassociation.
MOE_PROPERTY(TrainStep, IndependentOfDispatcher, 60, ()) {
  ScenarioShape shape;
  shape.dispatcher = dist::DispatcherKind::alltoall;
  const Scenario s = *scenarios(shape);
  tag(s);
  dist::CheckProblem p = make_problem(s);
  const GlobalStep oracle = dist::oracle_step(p);
  for (auto kind : all_values<dist::DispatcherKind>()) {
    p.options.dispatcher = kind;
    require_oracle_match(p, oracle, "the step");
  }
}

// Dropless, tp, cp, ep and etp only split the work of a microbatch: the oracle of the data-parallel-only layout
// (same dp, same microbatches) is the answer for every such layout.
MOE_PROPERTY(TrainStep, DroplessIndependentOfLayout, 80, ()) {
  ScenarioShape shape;
  shape.dropless = true;
  const Scenario s = *scenarios(shape);
  tag(s);
  const dist::CheckProblem p = make_problem(s);
  dist::CheckProblem plain = p;
  plain.layout = data_parallel_only(s.layout);
  require_oracle_match(p, dist::oracle_step(plain), "the step against the dp-only oracle");
}

// Capacity is per source rank (cp × tp shard) on its local tokens: the oracle given the layout's partition.
MOE_PROPERTY(TrainStep, CapacityMatchesOracleOnPartition, 80, ()) {
  ScenarioShape shape;
  shape.capacity = true;
  const Scenario s = *scenarios(shape);
  tag(s);
  const dist::CheckProblem p = make_problem(s);
  require_oracle_match(p, dist::oracle_step(p), "the step with capacity");
}

// Blocks with causal attention: heads over TP with SP, keys and values over CP by either exchange, between
// pipeline stages, under every scaling path and dispatcher; the whole step against the oracle.
MOE_PROPERTY(TrainStep, AttentionModelMatchesOracle, 300, ()) {
  ScenarioShape shape;
  shape.attention = true;
  const Scenario s = *scenarios(shape);
  tag(s);
  RC_TAG(s.layout.cp > 1 ? std::string("cp ") + std::string(dist::to_string(s.options.kv_exchange)) : "no cp",
         s.layout.tp > 1 ? "heads over tp" : "tp 1");
  const dist::CheckProblem p = make_problem(s);
  require_oracle_match(p, dist::oracle_step(p), "the step with attention");
}

// Multi-token prediction: each depth on every source rank's rows of the rolled batch, its gradient back into the
// main model through f⁰, its CE normalised by its own tokens; with attention or without, any dispatcher and path.
MOE_PROPERTY(TrainStep, MtpModelMatchesOracle, 150, ()) {
  ScenarioShape shape;
  shape.mtp = true;
  const Scenario s = *scenarios(shape);
  tag(s);
  RC_TAG(s.config.mtp_depth == 1 ? "depth 1" : "depth 2", s.config.has_attention() ? "attention" : "no attention");
  const dist::CheckProblem p = make_problem(s);
  require_oracle_match(p, dist::oracle_step(p), "the step with MTP");
}

// bf16 storage: the parallel system rounds at the oracle's storage points (the weights' bf16 copy, the residual
// stream, norm outputs, the experts' pre-activations and what fc2 multiplies, the MoE output, the logits, and the
// gradients of each) and nowhere else. A third of the cases have attention (q, k, v, the context, the output and
// their gradients, each stored once whole: after the KV exchange, after TP's reduction), a third MTP (the depth's
// norms, its projection, its logits). In double arithmetic the two then agree to double tolerance: a storage point
// missing or added on either side differs by a bf16 rounding, ~1e-3 of the value, far beyond it.
MOE_PROPERTY(TrainStep, Bf16StorageMatchesOracle, 150, ()) {
  ScenarioShape shape;
  const int kind = *rc::gen::inRange(0, 3);
  shape.attention = kind == 1;
  shape.mtp = kind == 2;
  Scenario s = *scenarios(shape);
  s.config.layer.bf16_storage = true;
  tag(s);
  RC_TAG(shape.mtp           ? std::string(s.config.has_attention() ? "mtp with attention" : "mtp")
         : !shape.attention  ? std::string("moe blocks")
         : s.layout.cp > 1   ? "attention, cp " + std::string(dist::to_string(s.options.kv_exchange))
                             : std::string("attention, cp 1"));
  const dist::CheckProblem p = make_problem(s);
  require_oracle_match(p, dist::oracle_step(p), "the step with bf16 storage");
}

// Hash layers look their experts up by input id; ids arrive [B, S] while rows are s·B + b, so with B > 1 a
// missing transpose or a mis-normalised weight shows up as a different routing or scale.
MOE_PROPERTY(TrainStep, HashRoutingAlignment, 60, ()) {
  ScenarioShape shape;
  shape.hash_layers = true;
  const Scenario s = *scenarios(shape);
  tag(s);
  const dist::CheckProblem p = make_problem(s);
  require_oracle_match(p, dist::oracle_step(p), "the step with hash layers");
}

// The expert-bias update: counts of real assignments after dropping over tp×dp×cp and the batch, identical on
// every rank, equal to the oracle's counts exactly and its updated bias within tolerance.
MOE_PROPERTY(TrainStep, ExpertBiasUpdateMatchesOracleOnEveryRank, 80, ()) {
  ScenarioShape shape;
  shape.bias_update = true;
  const Scenario s = *scenarios(shape);
  tag(s);
  const dist::CheckProblem p = make_problem(s);
  const GlobalStep oracle = dist::oracle_step(p);
  std::vector<dist::RankStep> steps(static_cast<size_t>(s.layout.world));
  std::mutex mu;
  InprocWorld(s.layout.world).run([&](Communicator& world) {
    const ProcessGroups groups(p.layout);
    const dist::RankGroups comms(world, groups);
    dist::RankStep step = dist::train_step(p.config, dist::shard_model(p.config, p.params, groups, world.rank()),
                                           p.batch, groups, comms, p.options);
    std::lock_guard<std::mutex> lock(mu);
    steps[static_cast<size_t>(world.rank())] = std::move(step);
  });
  // A rank holds its pipeline stage's layers; every rank holding a layer must have the same bits for it.
  std::map<int, Vector<double>> first_seen;
  for (size_t r = 0; r < steps.size(); ++r)
    for (size_t i = 0; i < steps[r].layers.size(); ++i) {
      const auto li = static_cast<size_t>(steps[r].layers[i]);
      RC_ASSERT(steps[r].bias_counts[i] == oracle.bias_counts[li]);
      const Vector<double>& got = steps[r].expert_bias_updated[i];
      const Vector<double>& want = oracle.expert_bias_updated[li];
      RC_ASSERT(got.size() == want.size());
      const auto seen = first_seen.emplace(steps[r].layers[i], got).first;
      RC_ASSERT(got == seen->second);
      for (Eigen::Index e = 0; e < want.size(); ++e) RC_ASSERT(p.tolerance.admits(got(e), want(e)));
    }
  RC_ASSERT(first_seen.size() == static_cast<size_t>(s.config.num_layers));  // every layer was checked
}

}  // namespace moe::proptest
