// One distributed MoE layer (router, dispatcher, ETP experts, TP shared expert with gate, capacity) against the
// oracle's layer on the same tokens, in double with a tight tolerance and in float with float's (the layer rows of
// reference/tolerance.hpp). The tokens of one oracle call are split over every rank of the world, each rank a
// source rank of the capacity partition; the ranks' gradient shards are summed over the groups that replicate
// them (world for replicated params, dp_cp for the TP-sharded shared expert, expt_dp for experts).
#include "distributed/comm/inproc_world.hpp"
#include "distributed/comm/row_collectives.hpp"
#include "distributed/train/moe_layer_rank.hpp"
#include "reference/param_cast.hpp"
#include "reference/random_init.hpp"
#include "reference/tolerance.hpp"

#include <gtest/gtest.h>

#include <mutex>
#include <numeric>

namespace moe::dist {
namespace {

template <typename T>
Tolerance tolerance() {
  return moe::tolerance(Compared::layer, std::is_same_v<T, double> ? Precision::float64 : Precision::float32);
}

MoeConfig layer_config(bool capacity) {
  MoeConfig c;
  c.hidden = 8;
  c.num_experts = 8;
  c.topk = 2;
  c.ffn_hidden = 4;
  c.score_function = ScoreFunction::sqrtsoftplus;
  c.topk_scaling_factor = 1.5;
  c.expert_bias = true;
  c.swiglu_clamp = 1.0;
  c.shared_expert_ffn_hidden = 4;
  c.shared_expert_gate = true;
  if (capacity) c.capacity_factor = 0.75;
  return c;
}

template <typename M>
double worst_ratio(const M& got, const Matrix<double>& want, const Tolerance& tol) {
  double worst = 0;
  for (Eigen::Index i = 0; i < want.size(); ++i)
    worst = std::max(worst, tol.ratio(static_cast<double>(got.data()[i]), want.data()[i]));
  return worst;
}

template <typename T>
void run_case(const ParallelLayout& layout, DispatcherKind kind, bool capacity) {
  const MoeConfig c = layer_config(capacity);
  const int seq = 8, batch = 2, tokens = seq * batch;
  // The oracle sees the values the backend sees: parameters and inputs rounded to T first.
  MoeParams<double> params = random_params<double>(c, 16, 61);
  MoeInputs<double> inputs = random_inputs<double>(c, seq, batch, 16, 62);
  Matrix<double> grad_y = random_grad_y<double>(c, tokens, 63);
  params = cast_params<double>(cast_params<T>(params));
  inputs.x = inputs.x.cast<T>().template cast<double>();
  grad_y = grad_y.cast<T>().template cast<double>();
  // Every rank is one source rank with a contiguous block of rows.
  const int world = layout.world;
  for (int r = 0; r < world; ++r) {
    std::vector<int> rows(static_cast<size_t>(tokens / world));
    std::iota(rows.begin(), rows.end(), r * tokens / world);
    inputs.partition.push_back(rows);
  }
  const auto want = moe_forward(c, params, inputs);
  const auto want_grads = moe_backward(c, params, inputs, want, grad_y);

  const ProcessGroups groups(layout);
  const Tolerance tol = tolerance<T>();
  std::mutex mu;
  Matrix<T> y(tokens, c.hidden), dx(tokens, c.hidden);
  double worst_grads = 0;
  std::int64_t assignments = 0;
  InprocWorld(world).run([&](Communicator& comm) {
    const RankGroups comms(comm, groups);
    const LayerShard<T> shard = shard_layer(c, cast_params<T>(params), groups, comm.rank());
    const auto& rows = inputs.partition[static_cast<size_t>(comm.rank())];
    const auto n = static_cast<Eigen::Index>(rows.size());
    MoeLayerRank<T> layer(c, shard, comms, kind);
    GlobalAuxCounts unused;
    const Matrix<T> x = inputs.x.middleRows(rows.front(), n).template cast<T>();
    const Matrix<T> local_y = layer.forward(x, RouterInputs{}, LocalTokens{{}, std::vector<int>(rows.size(), 0), 1},
                                            unused);
    LayerShard<T> grads = zeros_like(shard);
    const Matrix<T> local_dx =
        layer.backward(grad_y.middleRows(rows.front(), n).template cast<T>(), T(0), T(0), grads);

    // Complete each shard's gradient over the ranks that hold the same shard with other tokens.
    comms.tp_dp_cp->allreduce<T>(span_of(grads.router_weight), ReduceOp::sum);
    comms.tp_dp_cp->allreduce<T>(span_of(grads.shared_gate), ReduceOp::sum);
    comms.dp_cp->allreduce<T>(span_of(grads.shared_fc1), ReduceOp::sum);
    comms.dp_cp->allreduce<T>(span_of(grads.shared_fc2), ReduceOp::sum);
    for (size_t i = 0; i < grads.experts.fc1.size(); ++i) {
      comms.expt_dp->allreduce<T>(span_of(grads.experts.fc1[i]), ReduceOp::sum);
      comms.expt_dp->allreduce<T>(span_of(grads.experts.fc2[i]), ReduceOp::sum);
    }
    std::vector<std::int64_t> counts = layer.assignments();
    comms.tp_dp_cp->allreduce<std::int64_t>(counts, ReduceOp::sum);

    const LayerShard<double> expected = shard_layer(c, want_grads.params, groups, comm.rank());
    double worst = std::max({worst_ratio(grads.router_weight, expected.router_weight, tol),
                             worst_ratio(grads.shared_gate, expected.shared_gate, tol),
                             worst_ratio(grads.shared_fc1, expected.shared_fc1, tol),
                             worst_ratio(grads.shared_fc2, expected.shared_fc2, tol)});
    for (size_t i = 0; i < grads.experts.fc1.size(); ++i)
      worst = std::max({worst, worst_ratio(grads.experts.fc1[i], expected.experts.fc1[i], tol),
                        worst_ratio(grads.experts.fc2[i], expected.experts.fc2[i], tol)});
    std::lock_guard<std::mutex> lock(mu);
    y.middleRows(rows.front(), n) = local_y;
    dx.middleRows(rows.front(), n) = local_dx;
    worst_grads = std::max(worst_grads, worst);
    assignments = std::accumulate(counts.begin(), counts.end(), std::int64_t{0});
  });
  EXPECT_LE(worst_ratio(y, want.y, tol), 1.0) << "y";
  EXPECT_LE(worst_ratio(dx, want_grads.x, tol), 1.0) << "dx";
  EXPECT_LE(worst_grads, 1.0) << "parameter gradients";
  EXPECT_EQ(assignments, std::accumulate(want.routing.bias_counts.begin(), want.routing.bias_counts.end(),
                                         std::int64_t{0}));
}

struct Case {
  std::string name;
  ParallelLayout layout;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class LayerPrecision : public ::testing::TestWithParam<std::tuple<Case, DispatcherKind, bool>> {};

TEST_P(LayerPrecision, DoubleMatchesTheOracleLayer) {
  const auto& [c, kind, capacity] = GetParam();
  run_case<double>(c.layout, kind, capacity);
}

TEST_P(LayerPrecision, FloatMatchesTheOracleLayerWithinFloatTolerance) {
  const auto& [c, kind, capacity] = GetParam();
  run_case<float>(c.layout, kind, capacity);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, LayerPrecision,
    ::testing::Combine(::testing::Values(Case{"single", ParallelLayout{.world = 1}},
                                         Case{"ep2", ParallelLayout{.world = 2, .ep = 2}},
                                         Case{"ep2_etp2", ParallelLayout{.world = 4, .ep = 2, .etp = 2}},
                                         Case{"tp2_ep2", ParallelLayout{.world = 4, .tp = 2, .ep = 2}},
                                         Case{"tp2_ep2_etp2", ParallelLayout{.world = 8, .tp = 2, .ep = 2, .etp = 2}}),
                       ::testing::ValuesIn(all_values<DispatcherKind>()),
                       ::testing::Bool()),
    [](const auto& param_info) {
      return std::get<0>(param_info.param).name + "_" + std::string(to_string(std::get<1>(param_info.param))) +
             (std::get<2>(param_info.param) ? "_capacity" : "_dropless");
    });

}  // namespace
}  // namespace moe::dist
