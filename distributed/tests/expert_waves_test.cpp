// Wave-scheduled EP: the schedule's order (each combine after its compute, the sliding window), the wave split of
// the local experts, and one MoE layer run in 2 and 3 waves against the unwaved layer, bitwise, on in-process ranks
// with the computes on the worker thread.
#include "distributed/comm/inproc_world.hpp"
#include "distributed/train/expert_waves.hpp"
#include "distributed/train/moe_layer_rank.hpp"
#include "reference/random_init.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>
#include <numeric>

namespace moe::dist {
namespace {

std::ptrdiff_t position(const std::vector<WaveStep>& s, WaveOp op, int wave) {
  const auto it = std::find_if(s.begin(), s.end(), [&](const WaveStep& x) { return x.op == op && x.wave == wave; });
  EXPECT_NE(it, s.end()) << "step " << int(op) << " of wave " << wave << " missing";
  return it - s.begin();
}

TEST(ExpertWaves, EveryCombineWaitsForItsComputeAndTheWindowSlides) {
  for (int W : {2, 3, 5}) {
    const auto s = wave_schedule(W);
    EXPECT_EQ(s.size(), std::size_t(4 * W)) << W << " waves: one step of each kind per wave";
    for (int w = 0; w < W; ++w) {
      const auto launch = position(s, WaveOp::launch, w), wait = position(s, WaveOp::wait, w);
      EXPECT_LT(position(s, WaveOp::dispatch, w), launch) << "wave " << w << " computes on rows not dispatched";
      EXPECT_LT(launch, wait);
      EXPECT_LT(wait, position(s, WaveOp::combine, w)) << "wave " << w << "'s combine before its compute finished";
      // The overlap: while wave w computes, wave w+1 is dispatched and wave w−1 combined.
      if (w + 1 < W) {
        const auto next = position(s, WaveOp::dispatch, w + 1);
        EXPECT_TRUE(launch < next && next < wait) << "wave " << w + 1 << "'s dispatch outside wave " << w << "'s compute";
      }
      if (w > 0) {
        const auto previous = position(s, WaveOp::combine, w - 1);
        EXPECT_TRUE(launch < previous && previous < wait) << "wave " << w - 1 << "'s combine outside wave " << w
                                                          << "'s compute";
        EXPECT_LT(position(s, WaveOp::wait, w - 1), launch) << "one compute at a time";
      }
    }
  }
}

TEST(ExpertWaves, WavesAreContiguousNonEmptyBlocksOfTheLocalExperts) {
  for (int L : {2, 3, 4, 7, 8})
    for (int W = 2; W <= L; ++W) {
      std::vector<int> size(static_cast<size_t>(W), 0);
      int last = 0;
      for (int i = 0; i < L; ++i) {
        const int w = wave_of_local_expert(i, L, W);
        ASSERT_TRUE(w == last || w == last + 1) << "L " << L << " W " << W << " expert " << i;
        last = w;
        ++size[static_cast<size_t>(w)];
      }
      for (int w = 0; w < W; ++w) EXPECT_EQ(size[static_cast<size_t>(w)], (w + 1) * L / W - w * L / W);
    }
}

MoeConfig layer_config() {
  MoeConfig c;
  c.hidden = 8;
  c.num_experts = 12;
  c.topk = 3;
  c.ffn_hidden = 4;
  c.score_function = ScoreFunction::sigmoid;
  c.expert_bias = true;
  c.swiglu_clamp = 1.0;
  c.latent_size = 6;
  c.shared_expert_ffn_hidden = 4;
  return c;
}

struct LayerResult {
  Matrix<double> y, dx;
  std::vector<LayerShard<double>> grads;  // per rank
  bool computed_on_worker = true;
};

LayerResult run_layer(const ParallelLayout& layout, int waves) {
  const MoeConfig c = layer_config();
  const int tokens = 24;
  const MoeParams<double> params = random_params<double>(c, 16, 71);
  const MoeInputs<double> inputs = random_inputs<double>(c, tokens, 1, 16, 72);
  const Matrix<double> grad_y = random_grad_y<double>(c, tokens, 73);
  const ProcessGroups groups(layout);
  LayerResult out{Matrix<double>(tokens, c.hidden), Matrix<double>(tokens, c.hidden),
                  std::vector<LayerShard<double>>(static_cast<size_t>(layout.world)), true};
  std::mutex mu;
  InprocWorld(layout.world).run([&](Communicator& comm) {
    const RankGroups comms(comm, groups);
    const LayerShard<double> shard = shard_layer(c, params, groups, comm.rank());
    const Eigen::Index n = tokens / layout.world, first = comm.rank() * n;
    MoeLayerRank<double> layer(c, shard, comms, DispatcherKind::alltoall, cpu_kernels(), nullptr, waves);
    GlobalAuxCounts unused;
    const Matrix<double> y = layer.forward(inputs.x.middleRows(first, n), RouterInputs{},
                                           LocalTokens{{}, std::vector<int>(std::size_t(n), 0), 1}, unused);
    LayerShard<double> grads = zeros_like(shard);
    const Matrix<double> dx = layer.backward(grad_y.middleRows(first, n), 0.0, 0.0, grads);
    std::lock_guard<std::mutex> lock(mu);
    out.y.middleRows(first, n) = y;
    out.dx.middleRows(first, n) = dx;
    out.grads[static_cast<size_t>(comm.rank())] = grads;
    if (const auto* w = layer.waves())
      for (const auto* t : {&w->forward_timeline(), &w->backward_timeline()})
        for (const WaveSpan& s : *t) out.computed_on_worker &= (s.stage == WaveStage::compute) == s.on_worker;
  });
  return out;
}

TEST(ExpertWaves, LayerIsBitwiseTheUnwavedLayer) {
  // E = 12 over ep 4 (3 local experts) and ep 2 with ETP 2 (6 local experts, shards' partials summed per row).
  for (const ParallelLayout& layout : {ParallelLayout{.world = 4, .ep = 4}, ParallelLayout{.world = 4, .ep = 2, .etp = 2},
                                       ParallelLayout{.world = 4, .tp = 2, .ep = 4}}) {
    const LayerResult unwaved = run_layer(layout, 1);
    for (int waves : {2, 3}) {
      SCOPED_TRACE("tp " + std::to_string(layout.tp) + " ep " + std::to_string(layout.ep) + " etp " +
                   std::to_string(layout.etp) + ", " + std::to_string(waves) + " waves");
      const LayerResult waved = run_layer(layout, waves);
      EXPECT_TRUE(waved.computed_on_worker) << "each compute on the worker, each dispatch and combine on the rank";
      EXPECT_TRUE(waved.y == unwaved.y) << "y differs by " << (waved.y - unwaved.y).cwiseAbs().maxCoeff();
      EXPECT_TRUE(waved.dx == unwaved.dx) << "dx differs by " << (waved.dx - unwaved.dx).cwiseAbs().maxCoeff();
      for (size_t r = 0; r < waved.grads.size(); ++r) {
        const auto& a = waved.grads[r];
        const auto& b = unwaved.grads[r];
        EXPECT_TRUE(a.router_weight == b.router_weight) << "rank " << r;
        EXPECT_TRUE(a.latent_down == b.latent_down && a.latent_up == b.latent_up) << "rank " << r;
        for (size_t i = 0; i < a.experts.fc1.size(); ++i)
          EXPECT_TRUE(a.experts.fc1[i] == b.experts.fc1[i] && a.experts.fc2[i] == b.experts.fc2[i])
              << "rank " << r << " local expert " << i;
      }
    }
  }
}

TEST(ExpertWaves, RefusesWhatItCannotKeepBitwise) {
  const MoeConfig c = layer_config();
  const ProcessGroups groups(ParallelLayout{.world = 2, .ep = 2});
  InprocWorld(2).run([&](Communicator& comm) {
    const RankGroups comms(comm, groups);
    const LayerShard<double> shard = shard_layer(c, random_params<double>(c, 16, 1), groups, comm.rank());
    for (auto kind : {DispatcherKind::flex, DispatcherKind::allgather})
      EXPECT_THROW(MoeLayerRank<double>(c, shard, comms, kind, cpu_kernels(), nullptr, 2), std::invalid_argument);
    EXPECT_THROW(ExpertWaves<double>(7, comms.dispatch(), c.num_experts, cpu_kernels(), {}), std::invalid_argument)
        << "6 local experts cannot fill 7 waves";
    EXPECT_THROW(ExpertWaves<double>(1, comms.dispatch(), c.num_experts, cpu_kernels(), {}), std::invalid_argument);
  });
}

}  // namespace
}  // namespace moe::dist
