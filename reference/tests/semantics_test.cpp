// Semantics profiles: the catalogue, parsing, and each modelled deviation's effect on the oracle, checked against
// numbers worked out independently of the code that applies it (hand formulas, or the intended oracle on pieces).
#include "reference/semantics.hpp"

#include <gtest/gtest.h>

#include "reference/tests/model_diff.hpp"

#include <cmath>
#include <set>

#include "reference/capacity.hpp"
#include "reference/global_step.hpp"
#include "reference/router_losses.hpp"
#include "reference/tests/expect_error.hpp"

namespace moe {
namespace {

const Semantics kMegatron = Semantics::profile("megatron-core-0.19");

TEST(SemanticsCatalogue, EveryDeviationNamedWithItsSources) {
  const auto& catalogue = deviation_catalogue();
  ASSERT_EQ(static_cast<int>(catalogue.size()), kDeviations);
  std::set<std::string_view> names;
  for (size_t i = 0; i < catalogue.size(); ++i) {
    const DeviationInfo& d = catalogue[i];
    EXPECT_EQ(static_cast<size_t>(d.id), i) << d.name;  // in Deviation order: deviation_info indexes it
    EXPECT_TRUE(names.insert(d.name).second) << d.name;
    EXPECT_EQ(parse_deviation(d.name), d.id);
    for (std::string_view text : {d.statement, d.intended, d.megatron, d.upstream, d.visible})
      EXPECT_FALSE(text.empty()) << d.name;
    EXPECT_NE(d.megatron.find(".py"), std::string_view::npos) << d.name;
    EXPECT_TRUE(d.mean_modes || d.per_token_mode) << d.name;
  }
  test::expect_error("ce-per-cp-rank", [] { parse_deviation("ce-per-dp-rank"); });
}

TEST(SemanticsProfiles, ParseAndSpecRoundTrip) {
  EXPECT_TRUE(Semantics().intended());
  EXPECT_TRUE(Semantics::parse("intended").intended());
  EXPECT_TRUE(kMegatron.has(Deviation::ce_per_cp_rank));
  EXPECT_FALSE(kMegatron.has(Deviation::fused_swiglu_ignores_clamp));
  const Semantics s = Semantics::parse("megatron-core-0.19,-ce-per-cp-rank,+fused-swiglu-ignores-clamp");
  EXPECT_FALSE(s.has(Deviation::ce_per_cp_rank));
  EXPECT_TRUE(s.has(Deviation::fused_swiglu_ignores_clamp));
  EXPECT_TRUE(s.has(Deviation::z_loss_local_mean));
  EXPECT_EQ(s.spec(), "megatron-core-0.19,-ce-per-cp-rank,+fused-swiglu-ignores-clamp");
  EXPECT_EQ(Semantics::parse(s.spec()), s);
  EXPECT_EQ(Semantics::parse("intended,+z-loss-local-mean").deviations(),
            std::vector<Deviation>{Deviation::z_loss_local_mean});
  test::expect_error("megatron-core-0.19", [] { Semantics::parse("megatron"); });
  test::expect_error("+deviation or -deviation", [] { Semantics::parse("intended,z-loss-local-mean"); });
  test::expect_error("unknown deviation", [] { Semantics::parse("intended,+nothing"); });
  // A deviation named twice: "+x,-x" contradicts itself (the last used to win), "+x,+x" says it twice.
  test::expect_error("'z-loss-local-mean' is named twice",
                     [] { Semantics::parse("intended,+z-loss-local-mean,-z-loss-local-mean"); });
  test::expect_error("named twice", [] { Semantics::parse("megatron-core-0.19,-ce-per-cp-rank,-ce-per-cp-rank"); });
}

TEST(SemanticsProfiles, LossModeDecidesWhichDeviationsTakeEffect) {
  const Semantics pt = kMegatron.in_mode(LossMode::per_token);
  EXPECT_FALSE(pt.has(Deviation::ce_per_cp_rank));
  EXPECT_FALSE(pt.has(Deviation::z_loss_local_mean));
  EXPECT_TRUE(pt.has(Deviation::per_token_aux_local_tokens));
  const Semantics mean = kMegatron.in_mode(LossMode::sum);
  EXPECT_TRUE(mean.has(Deviation::ce_per_cp_rank));
  EXPECT_FALSE(mean.has(Deviation::per_token_aux_local_tokens));
}

TEST(SemanticsProfiles, ClampsOfTheSharedAndFusedSwiglu) {
  MoeConfig c;
  c.swiglu_clamp = 7.0;
  c.shared_expert_ffn_hidden = 4;
  EXPECT_EQ(c.routed_clamp(), 7.0);
  EXPECT_FALSE(c.shared_clamp());  // intended: DeepSeek-V4 leaves the shared expert unclamped
  c.semantics = kMegatron;
  EXPECT_EQ(c.shared_clamp(), 7.0);  // shared-expert-clamped
  c.semantics = kMegatron.with(Deviation::fused_swiglu_ignores_clamp, true);
  EXPECT_FALSE(c.routed_clamp());
  EXPECT_FALSE(c.shared_clamp());
}

// A one-layer softmax model whose layer losses are easy to reason about.
ModelConfig tiny_model(AuxLossType aux, double z_coeff) {
  ModelConfig m;
  m.layer.hidden = 4;
  m.layer.num_experts = 4;
  m.layer.topk = 2;
  m.layer.ffn_hidden = 3;
  m.layer.aux_loss_type = aux;
  m.layer.aux_loss_coeff = aux == AuxLossType::none ? 0.0 : 0.1;
  m.layer.z_loss_coeff = z_coeff;
  m.vocab = 10;
  return m;
}

// The issue's example: S = 4, CP 2 (chunks of one position: rank 0 holds {0, 3}, rank 1 holds {1, 2}), position 3
// masked. Megatron weights position 0 by 1/2 and positions 1, 2 by 1/4; the intended objective weights all three 1/3.
TEST(SemanticsOracle, CePerCpRankWeightsTheIssuesExample) {
  const ModelConfig intended = tiny_model(AuxLossType::none, 0.0);
  ModelConfig megatron = intended;
  megatron.layer.semantics = kMegatron;
  const auto params = random_model_params<double>(intended, 1);
  const GlobalBatch batch = random_global_batch(intended, 4, 1, 2, {1});
  const ParallelLayout cp2{.world = 2, .cp = 2};
  const GlobalStep m = global_step(megatron, params, batch, cp2, 1, LossMode::sum);
  const GlobalStep i = global_step(intended, params, batch, cp2, 1, LossMode::sum);
  const double want_m[] = {0.5, 0.25, 0.25, 0.0};
  for (int s = 0; s < 4; ++s) {
    EXPECT_DOUBLE_EQ(m.ce_weights(0, s), want_m[s]) << s;
    EXPECT_DOUBLE_EQ(i.ce_weights(0, s), s < 3 ? 1.0 / 3 : 0.0) << s;
  }
  // Without CP both agree: one CP rank holds every position.
  const GlobalStep m1 = global_step(megatron, params, batch, ParallelLayout{.world = 1}, 1, LossMode::sum);
  EXPECT_NEAR(m1.objective, i.objective, 1e-15);
  EXPECT_GT(std::abs(m.objective - i.objective), 1e-6);
}

double lse(const RowVector<double>& l) { return std::log(l.array().exp().sum()); }

// z-loss-local-mean: two parts (source ranks) with 1 and 2 valid rows. Megatron: Σ_p coeff/2 · mean_p lse²;
// intended: coeff · mean over all 3 valid rows.
TEST(SemanticsOracle, ZLossLocalMeanIsTheMeanOfTheRanksMeans) {
  MoeConfig c = tiny_model(AuxLossType::none, 0.3).layer;
  Matrix<double> logits(4, 4);
  logits << 0.1, -0.4, 0.7, 0.2,  //
      1.5, 0.3, -0.2, 0.0,        //
      -0.6, 0.9, 0.4, 1.1,        //
      0.5, 0.5, -1.0, 2.0;
  const std::vector<bool> padded{false, true, false, false};
  const std::vector<std::vector<int>> parts{{0, 1}, {2, 3}};
  const double l0 = lse(logits.row(0)), l2 = lse(logits.row(2)), l3 = lse(logits.row(3));
  EXPECT_NEAR(z_loss<double>(c, logits, padded, parts).value, 0.3 * (l0 * l0 + l2 * l2 + l3 * l3) / 3, 1e-15);
  c.semantics = Semantics().with(Deviation::z_loss_local_mean, true);
  EXPECT_NEAR(z_loss<double>(c, logits, padded, parts).value,
              0.3 / 2 * (l0 * l0 / 1) + 0.3 / 2 * (l2 * l2 + l3 * l3) / 2, 1e-15);
}

// seq-aux-mean-length: every sequence's statistic uses T = the mean valid length. Each sequence's term is
// coeff·E/(k·T²)·Σ_e P_e·c_e, so with the sequences' own terms a_b (T = n_b, computed by the intended oracle on
// that sequence alone) Megatron's value is 1/B·Σ_b a_b·n_b²/T̄².
TEST(SemanticsOracle, SeqAuxMeanLengthRescalesEachSequence) {
  const MoeConfig intended = tiny_model(AuxLossType::seq_aux, 0.0).layer;
  MoeConfig megatron = intended;
  megatron.semantics = Semantics().with(Deviation::seq_aux_mean_length, true);
  const int seq = 4, batch = 2;
  const ModelConfig model = tiny_model(AuxLossType::seq_aux, 0.0);
  const auto params = random_model_params<double>(model, 3).layers[0];
  MoeInputs<double> in;
  in.seq = seq;
  in.batch = batch;
  in.x = random_model_params<double>(model, 4).embedding.topRows(seq * batch);
  in.padding_mask = {false, false, false, false, false, true, false, true};  // sequence 1: positions 2, 3 padded
  const double n[] = {4, 2}, mean = 3;
  double want = 0;
  for (int b = 0; b < batch; ++b) {
    MoeInputs<double> one;
    one.seq = seq;
    one.batch = 1;
    one.x.resize(seq, in.x.cols());
    for (int s = 0; s < seq; ++s) {
      one.x.row(s) = in.x.row(s * batch + b);
      one.padding_mask.push_back(in.padding_mask[static_cast<size_t>(s * batch + b)]);
    }
    want += moe_forward(intended, params, one).aux_loss * n[b] * n[b] / (mean * mean) / batch;
  }
  EXPECT_NEAR(moe_forward(megatron, params, in).aux_loss, want, 1e-15);
  EXPECT_GT(std::abs(moe_forward(intended, params, in).aux_loss - want), 1e-6);
}

// bias-counts-padded-slots: Megatron's counts are the final map's column sums over valid tokens, padded capacity
// slots included; the intended counts leave those slots out.
TEST(SemanticsOracle, BiasCountsWithPaddedSlots) {
  MoeConfig c = tiny_model(AuxLossType::none, 0.0).layer;
  c.score_function = ScoreFunction::sigmoid;
  c.expert_bias = true;
  c.bias_update_rate = 1e-3;
  c.capacity_factor = 1.0;
  c.pad_to_capacity = true;
  const ModelConfig model = [&] {
    ModelConfig m = tiny_model(AuxLossType::none, 0.0);
    m.layer = c;
    return m;
  }();
  const auto params = random_model_params<double>(model, 5).layers[0];
  MoeInputs<double> in;
  in.seq = 8;
  in.batch = 1;
  in.x = random_model_params<double>(model, 6).embedding.topRows(8);
  in.padding_mask = {false, false, false, false, false, false, true, false};
  const auto intended = moe_forward(c, params, in).routing;
  c.semantics = Semantics().with(Deviation::bias_counts_padded_slots, true);
  const auto megatron = moe_forward(c, params, in).routing;
  ASSERT_EQ(intended.routing_map, megatron.routing_map);
  std::int64_t slots = 0, difference = 0;
  for (int e = 0; e < 4; ++e) {
    std::int64_t valid_column = 0;
    for (int t = 0; t < 8; ++t) valid_column += megatron.routing_map(t, e) && !in.padding_mask[static_cast<size_t>(t)];
    EXPECT_EQ(megatron.bias_counts[static_cast<size_t>(e)], valid_column) << e;
    difference += megatron.bias_counts[static_cast<size_t>(e)] - intended.bias_counts[static_cast<size_t>(e)];
  }
  for (int t = 0; t < 8; ++t)
    for (int e = 0; e < 4; ++e) slots += intended.padded_slot(t, e) && !in.padding_mask[static_cast<size_t>(t)];
  EXPECT_GT(slots, 0);  // the case pads somewhere, so the deviation shows
  EXPECT_EQ(difference, slots);
}

// global-aux-dp-average: Megatron's global_aux term is the intended one divided by dp.
TEST(SemanticsOracle, GlobalAuxAveragedOverReplicas) {
  const ModelConfig intended = tiny_model(AuxLossType::global_aux, 0.0);
  ModelConfig megatron = intended;
  megatron.layer.semantics = Semantics().with(Deviation::global_aux_dp_average, true);
  const auto params = random_model_params<double>(intended, 7);
  const GlobalBatch batch = random_global_batch(intended, 4, 4, 8, {0, 1, 2, 0});
  const ParallelLayout dp2{.world = 2};
  const GlobalStep i = global_step(intended, params, batch, dp2, 1, LossMode::sum);
  const GlobalStep m = global_step(megatron, params, batch, dp2, 1, LossMode::sum);
  EXPECT_NEAR(m.aux_term, i.aux_term / 2, 1e-15);
  EXPECT_GT(i.aux_term, 0);
}


using test::max_grad_diff;

// The largest difference in objective or gradient between a one-rank step and the same step split over tp and cp
// (dp and micro-batch fixed, dropless), under `semantics`.
double layout_dependence(ModelConfig c, const Semantics& semantics, LossMode mode) {
  c.layer.semantics = semantics;
  const auto params = random_model_params<double>(c, 21);
  // Padding uneven over the CP chunks of S = 8 (cp 2: rank 0 holds positions 0, 1, 6, 7).
  const GlobalBatch batch = random_global_batch(c, 8, 2, 22, {3, 1});
  const GlobalStep base = global_step(c, params, batch, ParallelLayout{.world = 1}, 2, mode);
  double worst = 0;
  for (const ParallelLayout& l : {ParallelLayout{.world = 2, .cp = 2}, ParallelLayout{.world = 2, .tp = 2},
                                  ParallelLayout{.world = 4, .tp = 2, .cp = 2, .ep = 2}}) {
    const GlobalStep g = global_step(c, params, batch, l, 2, mode);
    worst = std::max({worst, std::abs(g.objective - base.objective), max_grad_diff(c, g.grads, base.grads)});
  }
  return worst;
}

// Every layout dependence is a named deviation: with padding, the intended objective does not change with tp or
// cp; the Megatron profiles' does (the API-user variant, whose router sees the padding mask, in both loss modes);
// turning off exactly the catalogue's tp/cp-dependent deviations restores the invariance; and each of them alone
// breaks it (so none is listed without cause). With one MTP depth, whose per-token weight is one of them.
TEST(SemanticsOracle, TpCpDependenceIsAccountedForByNamedDeviations) {
  ModelConfig c = tiny_model(AuxLossType::aux, 0.2);
  c.layer.score_function = ScoreFunction::sigmoid;
  c.num_layers = 2;
  c.mtp_depth = 1;
  c.mtp_loss_scale = 0.3;
  std::vector<Deviation> dependent;
  for (const auto& d : deviation_catalogue())
    if (d.tp_cp_dependent) dependent.push_back(d.id);
  ASSERT_FALSE(dependent.empty());
  const Semantics api_user = Semantics::parse("megatron-main,-router-counts-padding");
  for (LossMode mode : {LossMode::sum, LossMode::per_token}) {
    EXPECT_LT(layout_dependence(c, Semantics(), mode), 1e-12) << to_string(mode);
    EXPECT_GT(layout_dependence(c, api_user, mode), 1e-6) << to_string(mode);
    for (Semantics s : {kMegatron, api_user}) {
      for (Deviation d : dependent) s = s.with(d, false);
      EXPECT_LT(layout_dependence(c, s, mode), 1e-12) << s.spec() << " " << to_string(mode);
    }
  }
  EXPECT_GT(layout_dependence(c, kMegatron, LossMode::sum), 1e-6);
  for (Deviation d : dependent) {
    const DeviationInfo& info = deviation_info(d);
    const LossMode mode = info.mean_modes ? LossMode::sum : LossMode::per_token;
    Semantics alone = Semantics().with(d, true);
    // per-token-aux-group-tokens changes what per-token-aux-local-tokens counts: it takes effect only with it.
    if (d == Deviation::per_token_aux_group_tokens) alone = alone.with(Deviation::per_token_aux_local_tokens, true);
    EXPECT_GT(layout_dependence(c, alone, mode), 1e-6) << info.name;
  }
}

// router-counts-padding: the router sees no padding mask, so padded tokens count in its statistics: the layer's
// aux loss under the profile is the intended aux loss of the same rows with nothing padded.
TEST(SemanticsOracle, RouterCountsPaddedTokens) {
  ModelConfig c = tiny_model(AuxLossType::aux, 0.2);
  const auto params = random_model_params<double>(c, 31);
  const GlobalBatch padded = random_global_batch(c, 4, 2, 32, {2, 0});
  GlobalBatch unpadded = padded;
  unpadded.loss_mask.setConstant(true);
  ModelConfig megatron = c;
  megatron.layer.semantics = Semantics().with(Deviation::router_counts_padding, true);
  const TokenBatch a = microbatch(padded, ParallelLayout{.world = 1}, 2, 0, 0);
  const TokenBatch b = microbatch(unpadded, ParallelLayout{.world = 1}, 2, 0, 0);
  const auto fm = model_forward(megatron, params, a);
  EXPECT_NEAR(fm.aux_sum, model_forward(c, params, b).aux_sum, 1e-15);
  EXPECT_NEAR(fm.z_sum, model_forward(c, params, b).z_sum, 1e-15);
  EXPECT_NEAR(fm.ce_sum, model_forward(c, params, a).ce_sum, 1e-15);  // CE is masked either way
  EXPECT_GT(std::abs(fm.aux_sum - model_forward(c, params, a).aux_sum), 1e-9);
}

// bias-counts-mask-broadcast: megatron-core 0.19.2 raises on an expert-bias update with a padding mask; so does
// the oracle, naming the deviation. With the router not seeing the mask (the profile's default) it runs.
TEST(SemanticsOracle, RefusesWhatMegatronRaisesOn) {
  ModelConfig c = tiny_model(AuxLossType::none, 0.0);
  c.layer.score_function = ScoreFunction::sigmoid;
  c.layer.expert_bias = true;
  c.layer.bias_update_rate = 1e-3;
  c.layer.semantics = Semantics::parse("megatron-core-0.19,-router-counts-padding");
  const auto params = random_model_params<double>(c, 33);
  const GlobalBatch batch = random_global_batch(c, 4, 1, 34, {1});
  test::expect_error("bias-counts-mask-broadcast",
                     [&] { global_step(c, params, batch, ParallelLayout{.world = 1}, 1, LossMode::sum); });
  c.layer.semantics = kMegatron;
  EXPECT_NO_THROW(global_step(c, params, batch, ParallelLayout{.world = 1}, 1, LossMode::sum));
}


// position-drop-tie-order / pad-filler-tie-order are replayed: the oracle takes the framework's final routing map as
// its capacity decision — kept = routed ∧ map, padded = map ∧ ¬routed — after checking it is a decision the rules
// allow. Here expert columns are chosen by hand: 4 tokens, top-1 by a hash table, capacity 1 per expert.
TEST(SemanticsOracle, ReplayedCapacityDecisionsAreTakenAndChecked) {
  MoeConfig c;
  c.hidden = 2;
  c.num_experts = 4;
  c.topk = 1;
  c.ffn_hidden = 2;
  c.score_function = ScoreFunction::sigmoid;
  c.capacity_factor = 1.0;  // cap = ceil(4·1/4·1) = 1
  BoolMatrix routed = BoolMatrix::Constant(4, 4, false);
  routed(0, 0) = routed(1, 0) = routed(2, 0) = routed(3, 1) = true;  // expert 0 over-full, 2 and 3 empty
  const std::vector<std::vector<int>> one_part{{0, 1, 2, 3}};
  BoolMatrix map = routed;
  map(0, 0) = map(1, 0) = false;  // keep token 2, not the earliest: what torch's tie order may pick
  const CapacityResult r = replay_capacity(c, routed, map, one_part);
  EXPECT_TRUE(r.keep(2, 0));
  EXPECT_FALSE(r.keep(0, 0));
  EXPECT_TRUE(r.keep(3, 1));
  test::expect_error("keeps 2 of its 3 routed tokens", [&] {
    BoolMatrix two = routed;
    two(0, 0) = false;
    replay_capacity(c, routed, two, one_part);
  });
  test::expect_error("holds a token not routed to it, without pad_to_capacity", [&] {
    BoolMatrix extra = map;
    extra(0, 2) = true;
    replay_capacity(c, routed, extra, one_part);
  });
  test::expect_error("drops a routed token although the expert is within capacity", [&] {
    BoolMatrix lost = map;
    lost(3, 1) = false;
    replay_capacity(c, routed, lost, one_part);
  });
  c.pad_to_capacity = true;
  BoolMatrix padded = map;
  padded(1, 2) = padded(0, 3) = true;  // fillers of the empty experts
  const CapacityResult p = replay_capacity(c, routed, padded, one_part);
  EXPECT_TRUE(p.padded(1, 2));
  EXPECT_FALSE(p.keep(1, 2));
  test::expect_error("is padded to 0 rows, not 1", [&] { replay_capacity(c, routed, map, one_part); });
}
}  // namespace
}  // namespace moe
