// The global step oracle: Megatron's data split, the objective of each loss mode, its layout (in)dependence,
// and end-to-end finite differences of J through every microbatch of every replica.
#include "reference/global_step.hpp"
#include "reference/tolerance.hpp"

#include <gtest/gtest.h>

#include "reference/tests/expect_error.hpp"
#include "reference/tests/model_diff.hpp"

#include <cmath>
#include <vector>

#include "reference/expert_bias.hpp"
#include "reference/optimizer.hpp"
#include "reference/random_init.hpp"
#include "reference/trajectory.hpp"

namespace moe {
namespace {

ModelConfig small_model(AuxLossType aux) {
  ModelConfig m;
  m.layer.hidden = 6;
  m.layer.num_experts = 4;
  m.layer.topk = 2;
  m.layer.ffn_hidden = 3;
  m.layer.score_function = ScoreFunction::sigmoid;
  m.layer.expert_bias = true;
  m.layer.bias_update_rate = 1e-3;
  m.layer.aux_loss_type = aux;
  m.layer.aux_loss_coeff = aux == AuxLossType::none ? 0.0 : 0.2;
  m.layer.z_loss_coeff = 0.05;
  m.num_layers = 2;
  m.n_hash_layers = 1;
  m.vocab = 12;
  return m;
}

using test::max_grad_diff;

// Issue 42: padded[b] > seq wrote before the loss_mask buffer (heap corruption); the rule lives here now, not
// only in the CLI's --padding.
TEST(GlobalStep, RandomBatchRefusesPaddingOutsideTheSequence) {
  const ModelConfig m = small_model(AuxLossType::none);
  test::expect_error("padded[1] = 9 is outside [0, seq = 8]", [&] { random_global_batch(m, 8, 2, 1, {0, 9}); });
  test::expect_error("padded[0] = -1 is outside", [&] { random_global_batch(m, 8, 2, 1, {-1, 0}); });
  test::expect_error("padded has 3 entries for a batch of 2", [&] { random_global_batch(m, 8, 2, 1, {0, 0, 0}); });
  const GlobalBatch whole = random_global_batch(m, 8, 2, 1, {8, 0});  // a fully padded sequence is allowed
  EXPECT_EQ(whole.loss_mask.row(0).count(), 0);
  EXPECT_EQ(whole.loss_mask.row(1).count(), 8);
}

// Issue 42: a hash-routing layer with vocab 0 divided by zero (SIGFPE) when drawing its ids.
TEST(GlobalStep, RandomLayerRefusesHashRoutingWithoutVocabulary) {
  MoeConfig c = small_model(AuxLossType::none).layer;
  c.expert_bias = false;
  c.bias_update_rate.reset();
  c.hash_routing = true;
  test::expect_error("hash routing needs vocab >= 1, got 0", [&] { random_inputs<double>(c, 4, 2, 0, 1); });
  test::expect_error("hash routing needs vocab >= 1, got 0", [&] { random_params<double>(c, 0, 1); });
}

TEST(GlobalStep, SplitsFollowMegatron) {
  // Sampler: microbatch i of replica r holds i·b·dp + r·b + [0, b): dp 2, b 2, r 1, i 1 → 6, 7.
  EXPECT_EQ(microbatch_sequences(2, 2, 1, 1), (std::vector<int>{6, 7}));
  // CP 2 on 8 positions: 4 chunks of 2; rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2.
  EXPECT_EQ(context_parallel_positions(8, 2, 0), (std::vector<int>{0, 1, 6, 7}));
  EXPECT_EQ(context_parallel_positions(8, 2, 1), (std::vector<int>{2, 3, 4, 5}));
  // Source ranks (cp, tp) with b = 2: rows s·2 + b of their positions; (cp 0, tp 1) holds positions 6, 7.
  const auto parts = source_rank_partition(8, 2, 2, 2);
  ASSERT_EQ(parts.size(), 4u);
  EXPECT_EQ(parts[1], (std::vector<int>{12, 13, 14, 15}));
  EXPECT_EQ(parts[2], (std::vector<int>{4, 5, 6, 7}));
}

TEST(GlobalStep, OneReplicaOneMicrobatchIsTheModel) {
  const ModelConfig c = small_model(AuxLossType::aux);
  const auto params = random_model_params<double>(c, 3);
  const auto batch = random_global_batch(c, 4, 2, 4, {0, 1});
  const GlobalStep g = global_step(c, params, batch, ParallelLayout{.world = 1}, 2, LossMode::sum);

  TokenBatch t = microbatch(batch, ParallelLayout{.world = 1}, 2, 0, 0);
  const auto f = model_forward(c, params, t);
  const double n = 7;  // 8 tokens, one padded
  EXPECT_NEAR(g.objective, f.ce_sum / n + f.aux_sum + f.z_sum, 1e-14);
  EXPECT_LT(max_grad_diff(c, g.grads, model_backward(c, params, t, f, {.ce = 1 / n})), 1e-15);
}

// Dropless and without aux statistics, per-token J is a sum over tokens: no layout can change it.
TEST(GlobalStep, PerTokenObjectiveIsLayoutIndependentWhenDropless) {
  const ModelConfig c = small_model(AuxLossType::none);
  const auto params = random_model_params<double>(c, 5);
  const auto batch = random_global_batch(c, 8, 4, 6, {0, 3, 1, 5});
  const GlobalStep base = global_step(c, params, batch, ParallelLayout{.world = 1}, 4, LossMode::per_token);
  struct Split {
    ParallelLayout l;
    int b;
  };
  for (const Split& s : {Split{ParallelLayout{.world = 1}, 1}, Split{ParallelLayout{.world = 2}, 2},
                         Split{ParallelLayout{.world = 4}, 1}, Split{ParallelLayout{.world = 4, .cp = 2}, 2},
                         Split{ParallelLayout{.world = 8, .tp = 2, .cp = 2}, 1}}) {
    const GlobalStep g = global_step(c, params, batch, s.l, s.b, LossMode::per_token);
    EXPECT_NEAR(g.objective, base.objective, 1e-13) << "world " << s.l.world << " b " << s.b;
    EXPECT_LT(max_grad_diff(c, g.grads, base.grads), 1e-13) << "world " << s.l.world << " b " << s.b;
    EXPECT_EQ(g.bias_counts, base.bias_counts);
  }
}

TEST(GlobalStep, DefaultObjectiveDependsOnLayoutOnlyThroughUnevenPadding) {
  const ModelConfig c = small_model(AuxLossType::none);
  const auto params = random_model_params<double>(c, 7);
  // No padding: every microbatch has b·S valid tokens, so the mean of means is the per-token mean.
  const auto even = random_global_batch(c, 4, 4, 8);
  const double per_token = global_step(c, params, even, ParallelLayout{.world = 1}, 4, LossMode::per_token).objective;
  for (int world : {1, 2, 4})
    for (int b : {1, 4 / world}) {
      EXPECT_NEAR(global_step(c, params, even, ParallelLayout{.world = world}, b, LossMode::sum).objective, per_token,
                  1e-13);
      EXPECT_NEAR(global_step(c, params, even, ParallelLayout{.world = world}, b, LossMode::avg).objective, per_token,
                  1e-13);
    }
  // Uneven padding: regrouping sequences into microbatches changes the weights 1/N_{r,i}, so J changes with dp.
  const auto uneven = random_global_batch(c, 4, 4, 8, {0, 3, 0, 0});
  const double one_replica = global_step(c, params, uneven, ParallelLayout{.world = 1}, 4, LossMode::sum).objective;
  const double four_replicas = global_step(c, params, uneven, ParallelLayout{.world = 4}, 1, LossMode::sum).objective;
  EXPECT_GT(std::abs(one_replica - four_replicas), 1e-3);
  // CP changes nothing (it splits positions of a microbatch, not microbatches).
  EXPECT_NEAR(global_step(c, params, uneven, ParallelLayout{.world = 2, .cp = 2}, 4, LossMode::sum).objective,
              one_replica, 1e-13);
}

TEST(GlobalStep, GlobalAuxTermIsTheGroupLossOverAllReplicas) {
  // With one microbatch per replica the global_aux group of the step is the union of the replicas'
  // microbatches: one model call on that union (fresh state) computes P, counts and T over all of it.
  const ModelConfig c = small_model(AuxLossType::global_aux);
  const auto params = random_model_params<double>(c, 9);
  const auto batch = random_global_batch(c, 4, 2, 10, {1, 0});
  const GlobalStep g = global_step(c, params, batch, ParallelLayout{.world = 2}, 1, LossMode::sum);
  const TokenBatch both = microbatch(batch, ParallelLayout{.world = 1}, 2, 0, 0);
  EXPECT_NEAR(g.aux_term, model_forward(c, params, both).aux_sum, 1e-15);
}

class GlobalStepGradient : public ::testing::TestWithParam<std::tuple<AuxLossType, LossMode, const char*>> {};

// Under every profile: the Megatron deviations weight rows differently (per CP rank, per source rank), and the
// oracle's gradient must still be the derivative of the objective it reports. With one MTP depth, whose CE is
// normalised by its own rolled tokens (per CP rank under ce-per-cp-rank; per-token, by each CP rank's N_c/Nᵏ_c
// under mtp-per-token-local-ratio) and whose block has global_aux state.
TEST_P(GlobalStepGradient, MatchesCentralDifferencesOfTheObjective) {
  const auto [aux, mode, profile] = GetParam();
  ModelConfig c = small_model(aux);
  c.layer.semantics = Semantics::profile(profile);
  c.mtp_depth = 1;
  c.mtp_loss_scale = 0.3;
  auto params = random_model_params<double>(c, 11);
  const auto batch = random_global_batch(c, 4, 8, 12, {0, 2, 0, 1, 3, 0, 0, 1});
  const ParallelLayout l = ParallelLayout{.world = 4, .cp = 2};  // dp 2, cp 2
  const int b = 2;                                               // m = 8 / (2·2) = 2 microbatches per replica
  const GlobalStep g = global_step(c, params, batch, l, b, mode);
  ASSERT_EQ(g.num_microbatches, 2);
  ModelParams<double> grads = g.grads;
  const auto values = trained_tensors(c, params);
  const auto analytic = trained_tensors(c, grads);
  const double h = 1e-6;
  int checked = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    for (Eigen::Index j = 0; j < values[i].size; j += std::max<Eigen::Index>(1, values[i].size / 5)) {
      const double saved = values[i].data[j];
      values[i].data[j] = saved + h;
      const double plus = global_step(c, params, batch, l, b, mode).objective;
      values[i].data[j] = saved - h;
      const double minus = global_step(c, params, batch, l, b, mode).objective;
      values[i].data[j] = saved;
      const double numeric = (plus - minus) / (2 * h);
      EXPECT_LE(tolerance(Compared::finite_difference, Precision::float64).ratio(analytic[i].data[j], numeric), 1.0)
          << values[i].name << "[" << j << "]: " << analytic[i].data[j] << " vs " << numeric;
      ++checked;
    }
  }
  EXPECT_GT(checked, 60);
}

INSTANTIATE_TEST_SUITE_P(LossModes, GlobalStepGradient,
                         ::testing::Combine(::testing::Values(AuxLossType::aux, AuxLossType::seq_aux,
                                                              AuxLossType::global_aux),
                                            ::testing::Values(LossMode::sum, LossMode::per_token),
                                            ::testing::Values("intended", "megatron-core-0.19")),
                         [](const auto& param_info) {
                           std::string profile = std::get<2>(param_info.param);
                           for (char& ch : profile)
                             if (ch == '-' || ch == '.') ch = '_';
                           return std::string(to_string(std::get<0>(param_info.param))) + "_" +
                                  (std::get<1>(param_info.param) == LossMode::sum ? "mean" : "per_token") + "_" +
                                  profile;
                         });

// One replica, one microbatch: the MTP term is λ/D times each depth's mean CE over the tokens it predicts (the
// valid positions ≥ k), computed here from the model's own per-row CE.
TEST(GlobalStep, MtpTermIsEachDepthsMeanOverItsRolledTokens) {
  ModelConfig c = small_model(AuxLossType::aux);
  c.mtp_depth = 2;
  c.mtp_loss_scale = 0.3;
  const auto params = random_model_params<double>(c, 21);
  const auto batch = random_global_batch(c, 6, 2, 22, {1, 3});  // valid positions: 0–4 and 0–2
  for (LossMode mode : {LossMode::sum, LossMode::per_token}) {
    const GlobalStep g = global_step(c, params, batch, ParallelLayout{.world = 1}, 2, mode);
    const ModelForward<double> f = model_forward(c, params, microbatch(batch, ParallelLayout{.world = 1}, 2, 0, 0));
    // Depth 1 predicts from positions 0–3 and 0–1 (6 tokens), depth 2 from 0–2 and 0 (4 tokens).
    const double want = 0.3 / 2 * (f.mtp[0].ce_sum / 6 + f.mtp[1].ce_sum / 4);
    EXPECT_NEAR(g.mtp_term, want, 1e-14 * std::abs(want)) << to_string(mode);
    EXPECT_NEAR(g.objective, g.ce_term + g.aux_term + g.z_term + g.mtp_term, 1e-15);
  }
}

TEST(GlobalStep, BiasUpdateUsesCountsOfTheWholeBatch) {
  const ModelConfig c = small_model(AuxLossType::aux);
  const auto params = random_model_params<double>(c, 13);
  const auto batch = random_global_batch(c, 4, 4, 14, {0, 0, 2, 0});
  const GlobalStep g = global_step(c, params, batch, ParallelLayout{.world = 2}, 1, LossMode::sum);
  // Layer 0 is a hash layer: no bias, no update. Layer 1 moves by the summed real assignments: 14 tokens × k.
  EXPECT_EQ(g.expert_bias_updated[0].size(), 0);
  std::int64_t total = 0;
  for (auto n : g.bias_counts[1]) total += n;
  EXPECT_EQ(total, 14 * 2);
  EXPECT_EQ(g.expert_bias_updated[1], updated_expert_bias(params.layers[1].expert_bias, g.bias_counts[1], 1e-3));
}

TEST(Optimizer, SgdAndAdamFirstStep) {
  const ModelConfig c = small_model(AuxLossType::none);
  const auto start = random_model_params<double>(c, 15);
  const auto batch = random_global_batch(c, 4, 2, 16);
  ModelParams<double> grads = global_step(c, start, batch, ParallelLayout{.world = 1}, 2, LossMode::sum).grads;

  ModelParams<double> sgd = start;
  sgd_step(c, {0.1}, sgd, grads);
  EXPECT_NEAR(sgd.head(2, 3), start.head(2, 3) - 0.1 * grads.head(2, 3), 1e-16);

  // Adam's first step: m̂ = g, v̂ = g², so θ moves by lr·g/(|g| + ε) (≈ lr·sign g) plus weight decay.
  ModelParams<double> adam = start;
  AdamState state;
  adam_step(c, {0.01, 0.9, 0.95, 1e-8, 0.1}, state, adam, grads);
  const double g = grads.layers[1].router_weight(1, 2);
  const double theta = start.layers[1].router_weight(1, 2);
  EXPECT_NEAR(adam.layers[1].router_weight(1, 2), theta - 0.01 * (g / (std::abs(g) + 1e-8) + 0.1 * theta), 1e-15);
  EXPECT_EQ(state.step, 1);
}


// Two nonzero gradients in different tensors, 3 and 4: the global norm is 5 (a 3-4-5 triangle), clipping to 1
// scales both by 1/(5 + 1e-6), and a max norm above 5 leaves them alone.
TEST(Optimizer, ClipGradNormScalesEveryTensorByOneGlobalFactor) {
  const ModelConfig c = small_model(AuxLossType::none);
  ModelParams<double> grads = random_model_params<double>(c, 17);
  for (const auto& t : trained_tensors(c, grads)) std::fill(t.data, t.data + t.size, 0.0);
  grads.head(0, 0) = 3.0;
  grads.layers[1].router_weight(0, 1) = -4.0;

  ModelParams<double> clipped = grads;
  const GradClip clip = clip_grad_norm(c, 1.0, clipped);
  EXPECT_EQ(clip.norm, 5.0);
  EXPECT_EQ(clip.coefficient, 1.0 / (5.0 + 1e-6));
  EXPECT_EQ(clipped.head(0, 0), 3.0 * clip.coefficient);
  EXPECT_EQ(clipped.layers[1].router_weight(0, 1), -4.0 * clip.coefficient);

  ModelParams<double> kept = grads;
  EXPECT_EQ(clip_grad_norm(c, 6.0, kept).coefficient, 1.0);
  EXPECT_EQ(kept.head(0, 0), 3.0);
  EXPECT_THROW(clip_grad_norm(c, 0.0, kept), std::invalid_argument);
}


// The clipped step against numbers no analytic code produced: every entry of ∇J by central differences of the
// global step's objective, their norm, Megatron's clip factor from that norm, and the SGD step (lr 1) they give.
// The trajectory's clipped step must land on the same parameters, and report the same norm.
TEST(Optimizer, ClippedStepMatchesCentralDifferences) {
  const ModelConfig c = small_model(AuxLossType::aux);
  const ModelParams<double> start = random_model_params<double>(c, 19);
  const GlobalBatch batch = random_global_batch(c, 4, 4, 20, {0, 1, 0, 2});
  const ParallelLayout layout{.world = 2};
  const auto objective = [&](const ModelParams<double>& p) {
    return global_step(c, p, batch, layout, 1, LossMode::sum).objective;
  };
  OptimizerConfig sgd;
  sgd.kind = OptimizerKind::sgd;
  sgd.sgd.lr = 1.0;
  sgd.clip_grad = 0.05;
  const TrajectoryPoint step = reference_trajectory(c, start, {batch}, layout, 1, LossMode::sum, sgd).front();

  const double h = 1e-6;
  ModelParams<double> probe = start;
  ModelParams<double> fd_grads = start;
  const auto values = trained_tensors(c, probe);
  const auto fd = trained_tensors(c, fd_grads);
  double squares = 0;
  for (size_t v = 0; v < values.size(); ++v)
    for (Eigen::Index i = 0; i < values[v].size; ++i) {
      const double saved = values[v].data[i];
      values[v].data[i] = saved + h;
      const double up = objective(probe);
      values[v].data[i] = saved - h;
      const double down = objective(probe);
      values[v].data[i] = saved;
      fd[v].data[i] = (up - down) / (2 * h);
      squares += fd[v].data[i] * fd[v].data[i];
    }
  const double norm = std::sqrt(squares);
  ASSERT_GT(norm, 2 * sgd.clip_grad);  // the step clips
  EXPECT_NEAR(step.grad_norm, norm, 1e-6 * norm);
  const double factor = sgd.clip_grad / (norm + 1e-6);
  ModelParams<double> after = step.params;
  const auto got = trained_tensors(c, after);
  ModelParams<double> origin = start;
  const auto theta = trained_tensors(c, origin);
  const Tolerance fd_tolerance = tolerance(Compared::finite_difference, Precision::float64);
  int checked = 0;
  for (size_t v = 0; v < got.size(); ++v)
    for (Eigen::Index i = 0; i < got[v].size; ++i, ++checked) {
      const double moved = theta[v].data[i] - got[v].data[i];  // c·g of the oracle's step
      EXPECT_LE(fd_tolerance.ratio(moved, factor * fd[v].data[i]), 1.0)
          << got[v].name << "[" << i << "]: " << moved << " vs " << factor * fd[v].data[i];
    }
  EXPECT_GT(checked, 300);
}

}  // namespace
}  // namespace moe
