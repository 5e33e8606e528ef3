// The parallel system against the global step oracle, in double with tight tolerances: every dispatcher on
// layouts with EP, ETP, EP×ETP, EDP > 1, TP ≠ ETP, CP > 1; dropless, capacity drop and drop-and-pad; every
// scaling path; a zero-token rank.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <tuple>

#include "distributed/check/differential_check.hpp"
#include "distributed/comm/inproc_world.hpp"
#include "distributed/train/pipeline_schedule.hpp"
#include "distributed/train/rank_groups.hpp"

namespace moe::dist {
namespace {

ModelConfig base_model() {
  ModelConfig m;
  m.layer.hidden = 8;
  m.layer.num_experts = 8;
  m.layer.topk = 2;
  m.layer.ffn_hidden = 4;
  m.layer.score_function = ScoreFunction::sigmoid;
  m.layer.expert_bias = true;
  m.layer.bias_update_rate = 1e-3;
  m.layer.shared_expert_ffn_hidden = 4;
  m.layer.aux_loss_type = AuxLossType::aux;
  m.layer.aux_loss_coeff = 0.1;
  m.layer.z_loss_coeff = 0.01;
  m.num_layers = 2;
  m.n_hash_layers = 1;
  m.vocab = 16;
  return m;
}

struct Case {
  std::string name;
  ParallelLayout layout;
  DispatcherKind dispatcher = DispatcherKind::alltoall;
  LossMode mode = LossMode::sum;
  int micro_batch = 1;
  std::function<void(ModelConfig&)> change = [](ModelConfig&) {};
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

// Every dispatcher × {dropless, capacity drop, drop-and-pad} × {EP, ETP, EP×ETP, EDP > 1, TP ≠ ETP, CP > 1}.
std::vector<Case> cases() {
  std::vector<Case> out;
  const std::vector<std::pair<std::string, ParallelLayout>> layouts = {
      {"ep2", ParallelLayout{.world = 2, .ep = 2}},
      {"etp2", ParallelLayout{.world = 2, .etp = 2}},
      {"ep2_etp2", ParallelLayout{.world = 4, .ep = 2, .etp = 2}},
      {"ep2_edp2", ParallelLayout{.world = 4, .ep = 2}},
      {"tp2_ep4_etp1", ParallelLayout{.world = 8, .tp = 2, .ep = 4}},
      {"cp2_ep2", ParallelLayout{.world = 4, .cp = 2, .ep = 2}},
      {"tp2_cp2_ep4_etp2", ParallelLayout{.world = 8, .tp = 2, .cp = 2, .ep = 4, .etp = 2}}};
  const std::vector<std::pair<std::string, std::function<void(ModelConfig&)>>> modes = {
      {"dropless", [](ModelConfig&) {}},
      {"drop", [](ModelConfig& m) { m.layer.capacity_factor = 0.75; }},
      {"pad", [](ModelConfig& m) {
         m.layer.capacity_factor = 1.0;
         m.layer.drop_policy = DropPolicy::position;
         m.layer.pad_to_capacity = true;
       }}};
  for (auto kind : all_values<DispatcherKind>())
    for (const auto& [lname, l] : layouts)
      for (const auto& [mname, change] : modes)
        out.push_back({std::string(to_string(kind)) + "_" + lname + "_" + mname, l, kind, LossMode::sum, 1, change});
  out.push_back({"single_rank", ParallelLayout{.world = 1}});
  // Pipeline stages: 4 layers over pp 2 and 4, with EP/ETP/TP/CP inside the stages.
  auto four_layers = [](ModelConfig& m) { m.num_layers = 4; };
  for (auto kind : all_values<DispatcherKind>()) {
    out.push_back({std::string(to_string(kind)) + "_pp2", ParallelLayout{.world = 2, .pp = 2}, kind, LossMode::sum, 1,
                   four_layers});
    out.push_back({std::string(to_string(kind)) + "_pp2_ep2_etp2",
                   ParallelLayout{.world = 8, .pp = 2, .ep = 2, .etp = 2}, kind, LossMode::sum, 2, four_layers});
    out.push_back({std::string(to_string(kind)) + "_pp4_tp2_ep2", ParallelLayout{.world = 8, .tp = 2, .pp = 4, .ep = 2},
                   kind, LossMode::per_token, 1, four_layers});
  }
  out.push_back({"pp2_cp2_global_aux_avg", ParallelLayout{.world = 8, .cp = 2, .pp = 2, .ep = 2},
                 DispatcherKind::alltoall, LossMode::avg, 1, [](ModelConfig& m) {
                   m.num_layers = 3;
                   m.layer.aux_loss_type = AuxLossType::global_aux;
                 }});
  for (auto mode : {LossMode::avg, LossMode::per_token})
    for (auto aux : {AuxLossType::seq_aux, AuxLossType::global_aux})
      out.push_back({std::string(to_string(aux)) + "_" + (mode == LossMode::avg ? "avg" : "per_token"),
                     ParallelLayout{.world = 8, .tp = 2, .cp = 2, .ep = 4}, DispatcherKind::alltoall, mode, 1,
                     [aux](ModelConfig& m) { m.layer.aux_loss_type = aux; }});
  out.push_back({"latent_gate_clamp_allgather", ParallelLayout{.world = 4, .tp = 2, .ep = 2, .etp = 2},
                 DispatcherKind::allgather, LossMode::sum, 2, [](ModelConfig& m) {
                   m.layer.latent_size = 6;
                   m.layer.shared_expert_gate = true;
                   m.layer.swiglu_clamp = 0.5;
                   m.layer.shared_expert_clamp = true;
                 }});
  out.push_back({"softmax_groups_micro2", ParallelLayout{.world = 4, .ep = 4}, DispatcherKind::flex,
                 LossMode::per_token, 2, [](ModelConfig& m) {
                   m.layer.score_function = ScoreFunction::softmax;
                   m.layer.expert_bias = false;
                   m.layer.bias_update_rate.reset();
                   m.layer.num_groups = 4;
                   m.layer.group_topk = 2;
                 }});
  return out;
}

class TrainStepTest : public ::testing::TestWithParam<Case> {};

TEST_P(TrainStepTest, MatchesTheGlobalStepOracle) {
  const Case& c = GetParam();
  CheckProblem p;
  p.config = base_model();
  c.change(p.config);
  p.params = random_model_params<double>(p.config, 31);
  // 8 sequences of 8 tokens, uneven padding (a sequence with no valid token at the end of the batch).
  p.batch = random_global_batch(p.config, 8, 8, 32, {0, 3, 0, 1, 0, 0, 5, 8});
  p.layout = c.layout;
  p.options = {c.dispatcher, c.mode, c.micro_batch};
  const GlobalStep oracle = oracle_step(p);
  const RankComparison r = check_inproc(p, oracle);
  for (int q = 0; q < kQuantities; ++q)
    RecordProperty(std::string(to_string(static_cast<Quantity>(q))),
                   std::to_string(r.errors[static_cast<size_t>(q)].max_abs));
  EXPECT_TRUE(r.pass()) << "first mismatch: " << r.first.tensor << " on rank " << r.first.rank << " at "
                        << r.first.index << ": got " << r.first.got << ", want " << r.first.want;
  EXPECT_GT(r.errors[static_cast<size_t>(Quantity::grad_expert)].compared, 0);
}

INSTANTIATE_TEST_SUITE_P(Layouts, TrainStepTest, ::testing::ValuesIn(cases()),
                         [](const auto& param_info) { return param_info.param.name; });

}  // namespace
}  // namespace moe::dist

namespace moe::dist {
namespace {

// Every rank's synchronised gradient shard, flattened, for comparisons between runs of the parallel system.
std::vector<std::vector<double>> rank_gradients(const CheckProblem& p) {
  std::vector<std::vector<double>> grads(static_cast<size_t>(p.layout.world));
  std::mutex mu;
  InprocWorld(p.layout.world).run([&](Communicator& world) {
    const ProcessGroups groups(p.layout);
    const RankGroups comms(world, groups);
    RankStep step =
        train_step(p.config, shard_model(p.config, p.params, groups, world.rank()), p.batch, groups, comms, p.options);
    std::vector<double> flat{step.objective};
    for (const auto& t : shard_tensors(step.grads, groups.experts_of(world.rank(), p.config.layer.num_experts).first))
      flat.insert(flat.end(), t.data, t.data + t.size);
    std::lock_guard<std::mutex> lock(mu);
    grads[static_cast<size_t>(world.rank())] = std::move(flat);
  });
  return grads;
}

double max_relative_difference(const std::vector<std::vector<double>>& a, const std::vector<std::vector<double>>& b) {
  double d = 0;
  for (size_t r = 0; r < a.size(); ++r) {
    EXPECT_EQ(a[r].size(), b[r].size());
    for (size_t i = 0; i < a[r].size(); ++i) d = std::max(d, std::abs(a[r][i] - b[r][i]) / (1e-12 + std::abs(b[r][i])));
  }
  return d;
}

CheckProblem problem(const ParallelLayout& l, const std::vector<int>& padded) {
  CheckProblem p;
  p.config = base_model();
  p.params = random_model_params<double>(p.config, 41);
  p.batch = random_global_batch(p.config, 8, 8, 42, padded);
  p.layout = l;
  return p;
}

TEST(TrainStepAgreement, AllGatherEqualsAlltoAllEqualsFlex) {
  CheckProblem p = problem(ParallelLayout{.world = 8, .tp = 2, .ep = 2, .etp = 2}, {0, 2, 0, 0, 1, 0, 0, 3});
  const auto alltoall = rank_gradients(p);
  for (auto kind : {DispatcherKind::allgather, DispatcherKind::flex}) {
    p.options.dispatcher = kind;
    EXPECT_LT(max_relative_difference(rank_gradients(p), alltoall), 1e-9) << to_string(kind);
  }
}

// Without padding every microbatch has the same number of valid tokens, so the per-microbatch mean (sum, avg)
// and the per-token objective are the same function: the three scaling paths must give the same gradients.
TEST(TrainStepAgreement, SumEqualsAvgEqualsPerTokenWhenTheObjectiveCoincides) {
  CheckProblem p = problem(ParallelLayout{.world = 8, .tp = 2, .cp = 2, .ep = 4}, {});
  const auto sum = rank_gradients(p);
  for (auto mode : {LossMode::avg, LossMode::per_token}) {
    p.options.mode = mode;
    EXPECT_LT(max_relative_difference(rank_gradients(p), sum), 1e-9) << to_string(mode);
  }
  // With uneven padding the objectives differ, and so must the gradients (the comparison has teeth).
  CheckProblem padded = problem(ParallelLayout{.world = 8, .tp = 2, .cp = 2, .ep = 4}, {0, 5, 0, 0, 0, 0, 0, 6});
  const auto padded_sum = rank_gradients(padded);
  padded.options.mode = LossMode::per_token;
  EXPECT_GT(max_relative_difference(rank_gradients(padded), padded_sum), 1e-3);
}

TEST(TrainStepAgreement, ResultsDoNotDependOnThePipelineSchedule) {
  CheckProblem p = problem(ParallelLayout{.world = 8, .pp = 4, .ep = 2}, {0, 2, 0, 0, 1, 0, 0, 3});
  p.config.num_layers = 4;
  p.params = random_model_params<double>(p.config, 44);
  p.options.micro_batch = 1;  // m = 8 / (1 · dp 2) = 4 microbatches through 4 stages
  const auto one_f_one_b = rank_gradients(p);
  p.options.schedule = Schedule::all_forward_all_backward;
  EXPECT_EQ(max_relative_difference(rank_gradients(p), one_f_one_b), 0.0);
}

// The interleaved pipeline (vpp model chunks per rank, 8 layers) gives the bits of running every chunk's forwards,
// then every backward, and matches the oracle: with m = pp (all warm-up) and m > pp (the 1F1B steady state).
TEST(TrainStepAgreement, InterleavedPipelineGivesTheBitsOfAllForwardAllBackward) {
  struct Interleaved {
    ParallelLayout layout;
    int sequences;  // m = sequences / dp
  };
  // The objective is summed chunk by chunk: one running sum over the rank's forwards in schedule order
  // differs from all-forward-all-backward in the last bit on some of these (pp4 vpp2 m 8, for one).
  for (std::uint64_t seed : {45, 47, 49})
  for (const Interleaved& c : {Interleaved{ParallelLayout{.world = 4, .pp = 2, .ep = 2, .vpp = 2}, 8},
                               Interleaved{ParallelLayout{.world = 4, .pp = 2, .ep = 2, .vpp = 4}, 4},
                               Interleaved{ParallelLayout{.world = 8, .pp = 4, .ep = 2, .vpp = 2}, 16},
                               Interleaved{ParallelLayout{.world = 8, .pp = 4, .ep = 2, .vpp = 2}, 8}}) {
    CheckProblem p = problem(c.layout, {});
    p.config.num_layers = 8;
    p.params = random_model_params<double>(p.config, seed);
    std::vector<int> padded(static_cast<size_t>(c.sequences), 0);
    padded[1] = 2;
    padded[3] = 5;
    p.batch = random_global_batch(p.config, 8, c.sequences, seed + 1, padded);
    p.options.micro_batch = 1;
    const std::string name = "pp" + std::to_string(c.layout.pp) + " vpp" + std::to_string(c.layout.vpp) + " m " +
                             std::to_string(c.sequences / c.layout.dp());
    const RankComparison r = check_inproc(p, oracle_step(p));
    EXPECT_TRUE(r.pass()) << name << ": " << r.first.tensor << " rank " << r.first.rank;
    const auto interleaved = rank_gradients(p);
    p.options.schedule = Schedule::all_forward_all_backward;
    EXPECT_EQ(max_relative_difference(rank_gradients(p), interleaved), 0.0) << name;
  }
}

// FP8 dispatch with rows of two tiles (hidden 160 = 128 + 32): every dispatcher sends the rows the oracle
// quantises, so the step matches it at double's tolerance; and the quantisation does change the step.
TEST(TrainStepAgreement, Fp8DispatchMatchesTheOracleOnEveryDispatcher) {
  CheckProblem p = problem(ParallelLayout{.world = 4, .ep = 2, .etp = 2}, {0, 2, 0, 0, 1, 0, 0, 3});
  p.config.layer.hidden = 160;
  p.config.layer.fp8_dispatch = true;
  p.params = random_model_params<double>(p.config, 51);
  p.batch = random_global_batch(p.config, 8, 8, 52, {0, 2, 0, 0, 1, 0, 0, 3});
  const GlobalStep oracle = oracle_step(p);
  for (auto kind : all_values<DispatcherKind>()) {
    p.options.dispatcher = kind;
    const RankComparison r = check_inproc(p, oracle);
    EXPECT_TRUE(r.pass()) << to_string(kind) << ": " << r.first.tensor << " rank " << r.first.rank;
  }
  CheckProblem plain = p;
  plain.config.layer.fp8_dispatch = false;
  EXPECT_GT(std::abs(oracle_step(plain).objective - oracle.objective), 1e-6);
}

TEST(TrainStepAgreement, ZeroTokenExpertRankMatchesTheOracle) {
  // A bias of −10 on experts 6 and 7 (sigmoid scores are below 1) keeps every token away from them: the EP rank
  // holding them receives no rows, and its expert gradients are exactly zero.
  for (auto kind : all_values<DispatcherKind>()) {
    CheckProblem p = problem(ParallelLayout{.world = 4, .ep = 4}, {});
    p.config.n_hash_layers = 0;  // hash layers route by table, not by score
    p.params = random_model_params<double>(p.config, 43);
    for (auto& layer : p.params.layers) layer.expert_bias.tail(2).setConstant(-10.0);
    p.options.dispatcher = kind;
    const GlobalStep oracle = oracle_step(p);
    for (const auto& layer : oracle.grads.layers) EXPECT_EQ(layer.expert_fc1[7].cwiseAbs().maxCoeff(), 0.0);
    const RankComparison r = check_inproc(p, oracle);
    EXPECT_TRUE(r.pass()) << to_string(kind) << ": " << r.first.tensor << " rank " << r.first.rank;
  }
}

}  // namespace
}  // namespace moe::dist

namespace moe::dist {
namespace {

// The whole step in float (the shard cast, every kernel and collective in float) against the double oracle,
// within float's tolerance; the same tolerance rejects a double-precision-sized error budget of zero.
class TrainStepFloat : public ::testing::TestWithParam<std::tuple<DispatcherKind, int>> {};

TEST_P(TrainStepFloat, MatchesTheOracleWithinFloatTolerance) {
  const auto [kind, which] = GetParam();
  const std::vector<ParallelLayout> layouts = {ParallelLayout{.world = 4, .ep = 2, .etp = 2},
                                               ParallelLayout{.world = 8, .tp = 2, .cp = 2, .ep = 4},
                                               ParallelLayout{.world = 8, .pp = 2, .ep = 2, .etp = 2}};
  CheckProblem p = problem(layouts[static_cast<size_t>(which)], {0, 2, 0, 0, 1, 0, 0, 3});
  p.options.dispatcher = kind;
  p.options.precision = Precision::float32;
  p.tolerance = tolerance(Compared::training_step, Precision::float32);
  const GlobalStep oracle = oracle_step(p);
  const RankComparison r = check_inproc(p, oracle);
  EXPECT_TRUE(r.pass()) << r.first.tensor << " rank " << r.first.rank << ": " << r.first.got << " vs " << r.first.want;
  // Float really ran: it is not bit-identical to the oracle (a zero tolerance must fail).
  p.tolerance = {0, 0};
  EXPECT_FALSE(check_inproc(p, oracle).pass());
}

INSTANTIATE_TEST_SUITE_P(
    Dispatchers, TrainStepFloat,
    ::testing::Combine(::testing::ValuesIn(all_values<DispatcherKind>()),
                       ::testing::Values(0, 1, 2)),
    [](const auto& param_info) {
      return std::string(to_string(std::get<0>(param_info.param))) + "_layout" +
             std::to_string(std::get<1>(param_info.param));
    });

}  // namespace
}  // namespace moe::dist

namespace moe::dist {
namespace {

std::string render(const std::vector<PipelineOp>& ops) {
  std::string s;
  for (const PipelineOp& op : ops)
    s += std::string(op.forward ? "F" : "B") + std::to_string(op.chunk) + "." + std::to_string(op.microbatch) + " ";
  return s;
}

// One rank's step of base_model on one process and the oracle's, for the tests of the comparison itself.
struct OneRankStep {
  CheckProblem p;
  GlobalStep oracle;
  ProcessGroups groups{ParallelLayout{}};
  RankStep step;
  OneRankStep() {
    p.config = base_model();  // layer 0 routes by hash
    p.params = random_model_params<double>(p.config, 5);
    p.batch = random_global_batch(p.config, 8, 2, 6);
    p.layout = ParallelLayout{};
    p.options = {DispatcherKind::alltoall, LossMode::sum, 1};
    oracle = oracle_step(p);
    InprocWorld(1).run([&](Communicator& world) { step = step_on_world(world, p, groups); });
  }
  // The rank's step (as it is now: tests change it) against the oracle's.
  RankComparison compare() { return compare_with_oracle(p.config, oracle, step, groups, 0, p.tolerance); }
};

// The comparison itself: on one rank, gradients equal to the oracle's but for two elements of one tensor. It names
// the first failing element in tensor order (not the largest), and its maxima and counts cover every element.
TEST(OracleComparison, NamesTheFirstMismatchAndKeepsTheMaxima) {
  OneRankStep one;
  RankStep& step = one.step;
  const RankComparison same = one.compare();
  ASSERT_TRUE(same.pass());
  const long long elements = same.errors[static_cast<size_t>(Quantity::grad_expert)].compared;
  ASSERT_GT(elements, 5);

  Matrix<double>& fc1 = step.grads.layers[0].experts.fc1[1];
  const double before = fc1(0, 3);  // the oracle's value up to rounding
  fc1(0, 3) += 1.0;  // flat index 3: the first failing element
  fc1(1, 0) -= 4.0;  // a later, larger one
  const RankComparison r = one.compare();
  ASSERT_FALSE(r.pass());
  EXPECT_EQ(r.first.tensor, "layer0.expert_fc1[1]");
  EXPECT_EQ(r.first.index, 3);
  EXPECT_EQ(r.first.got, fc1(0, 3));
  EXPECT_NEAR(r.first.want, before, 1e-9);
  const QuantityError& e = r.errors[static_cast<size_t>(Quantity::grad_expert)];
  EXPECT_NEAR(e.max_abs, 4.0, 1e-9);
  EXPECT_GT(e.max_ratio, 1.0);
  EXPECT_EQ(e.compared, elements);
}

// A hash layer's expert counts have no bias to reveal them (they feed only the next step's replica plans), so the
// comparison checks them on their own, exactly: one count moved from one expert to another (the total unchanged)
// fails, naming the layer and the expert.
TEST(OracleComparison, ComparesEveryLayersExpertCountsExactly) {
  OneRankStep one;
  RankStep& step = one.step;
  const RankComparison same = one.compare();
  ASSERT_TRUE(same.pass());
  const QuantityError& counted = same.errors[static_cast<size_t>(Quantity::expert_counts)];
  EXPECT_EQ(counted.compared, one.p.config.num_blocks() * one.p.config.layer.num_experts);
  EXPECT_EQ(counted.max_abs, 0.0);

  ASSERT_EQ(step.layers.front(), 0);
  ASSERT_TRUE(one.p.config.layer_config(0).hash_routing);
  auto& hash_counts = step.bias_counts.front();
  const auto from = std::max_element(hash_counts.begin(), hash_counts.end()) - hash_counts.begin();
  const auto to = (from + 3) % static_cast<long>(hash_counts.size());
  --hash_counts[static_cast<size_t>(from)];
  ++hash_counts[static_cast<size_t>(to)];
  const RankComparison r = one.compare();
  ASSERT_FALSE(r.pass());
  EXPECT_EQ(r.first.tensor, "layer0.expert_counts");
  EXPECT_EQ(r.first.index, std::min(from, to));
  EXPECT_EQ(r.errors[static_cast<size_t>(Quantity::expert_counts)].max_abs, 1.0);
}

// pp 2, 2 chunks, 4 microbatches, by hand from the rule in pipeline_schedule.hpp. Forward k runs microbatch
// (k div 4)·2 + k mod 2 of chunk (k mod 4) div 2; backward k the same with the chunks reversed. Rank 0 warms up
// with (2 − 0 − 1)·2 + (2 − 1)·2 = 4 forwards, rank 1 with 2.
TEST(PipelineSchedule, InterleavedOrderByHand) {
  EXPECT_EQ(render(interleaved_one_forward_one_backward(2, 0, 4, 2)),
            "F0.0 F0.1 F1.0 F1.1 F0.2 B1.0 F0.3 B1.1 F1.2 B0.0 F1.3 B0.1 B1.2 B1.3 B0.2 B0.3 ");
  EXPECT_EQ(render(interleaved_one_forward_one_backward(2, 1, 4, 2)),
            "F0.0 F0.1 F1.0 B1.0 F1.1 B1.1 F0.2 B0.0 F0.3 B0.1 F1.2 B1.2 F1.3 B1.3 B0.2 B0.3 ");
  // m = pp: everything warms up first, as Megatron does.
  EXPECT_EQ(render(interleaved_one_forward_one_backward(2, 1, 2, 2)), "F0.0 F0.1 F1.0 F1.1 B1.0 B1.1 B0.0 B0.1 ");
  // One chunk is the plain 1F1B.
  EXPECT_EQ(render(interleaved_one_forward_one_backward(3, 0, 4, 1)), render(one_forward_one_backward(3, 0, 4)));
}

TEST(PipelineSchedule, InterleavedRunsEveryChunkAndMicrobatchOnceEachWay) {
  for (int pp : {2, 3, 4})
    for (int v : {2, 3})
      for (int m : {pp, 2 * pp, 3 * pp})
        for (int s = 0; s < pp; ++s) {
          std::set<std::tuple<bool, int, int>> seen;
          for (const PipelineOp& op : interleaved_one_forward_one_backward(pp, s, m, v)) {
            EXPECT_TRUE(op.forward || seen.count({true, op.chunk, op.microbatch})) << "backward before forward";
            EXPECT_TRUE(seen.insert({op.forward, op.chunk, op.microbatch}).second) << "run twice";
          }
          EXPECT_EQ(seen.size(), size_t(2 * m * v));
        }
  EXPECT_THROW(interleaved_one_forward_one_backward(4, 0, 6, 2), std::invalid_argument);  // m not a multiple of pp
  EXPECT_THROW(interleaved_one_forward_one_backward(1, 0, 4, 2), std::invalid_argument);
}

}  // namespace
}  // namespace moe::dist
