#include "reference/process_groups.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "reference/presets.hpp"
#include "reference/tests/seed_layout.hpp"

namespace moe {
namespace {

using Groups = std::vector<std::vector<int>>;

// Seed 000: N = 1024, PP8, TP1, CP2, EP64, ETP1 with V4-Pro's 384 routed experts.
class SeedLayout : public ::testing::Test {
 protected:
  ProcessGroups groups{test::seed_layout()};
  int num_experts = layer_preset("v4-pro").config.num_experts;
};

// 384 experts / EP64 = 6 per rank per layer; EP rank 0 holds 0–5, EP rank 1 holds 6–11 (contiguous placement).
TEST_F(SeedLayout, RanksHoldContiguousExperts) {
  EXPECT_EQ(num_experts, 384);
  EXPECT_EQ(groups.experts_of(0, num_experts), (ExpertRange{0, 6}));
  EXPECT_EQ(groups.experts_of(64, num_experts), (ExpertRange{0, 6}));
  EXPECT_EQ(groups.experts_of(1, num_experts), (ExpertRange{6, 6}));
  for (int r : {0, 1, 64, 127, 500, 1023}) EXPECT_EQ(groups.experts_of(r, num_experts).count, 6) << r;
}

// Ranks 0 and 64 hold the same experts, so their grads are reduced together: they share an expt_dp group, which
// has EDP = 2 members. Ranks 0 and 1 hold different experts and share no expt_dp group.
TEST_F(SeedLayout, ReplicasOfAnExpertShareExptDp) {
  EXPECT_EQ(groups.group(GroupKind::expt_dp, 0), (std::vector<int>{0, 64}));
  EXPECT_EQ(groups.group(GroupKind::expt_dp, 64), (std::vector<int>{0, 64}));
  const auto of_1 = groups.group(GroupKind::expt_dp, 1);
  EXPECT_EQ(std::count(of_1.begin(), of_1.end(), 0), 0);
}

// Default order tp-cp-ep-dp-pp, size-1 axes ignored: in stage 0 (ranks 0..127),
//   dense:  r = c + 2·d_a   (c ∈ [0,1], d_a ∈ [0,63]),   expert: r = e + 64·d_e   (e ∈ [0,63], d_e ∈ [0,1]).
// |dp_cp| = CP·D_a = 128 and the pp group of rank 0 steps by one stage of 128 ranks.
TEST_F(SeedLayout, StageCoordinatesInBothMeshes) {
  for (int r = 0; r < 128; ++r) {
    EXPECT_EQ(r, groups.rank_in(GroupKind::cp, r) + 2 * groups.rank_in(GroupKind::dp, r)) << r;
    EXPECT_EQ(r, groups.rank_in(GroupKind::ep, r) + 64 * groups.rank_in(GroupKind::expt_dp, r)) << r;
  }
  EXPECT_EQ(groups.group(GroupKind::dp_cp, 0).size(), 128u);
  EXPECT_EQ(groups.group(GroupKind::cp, 0), (std::vector<int>{0, 1}));
  EXPECT_EQ(groups.group(GroupKind::pp, 0), (std::vector<int>{0, 128, 256, 384, 512, 640, 768, 896}));
}

// Seed 000, "ETP 里的矩阵": 4 ranks, ETP2 × EP2, default order: ETP groups [0,1],[2,3]; EP groups [0,2],[1,3].
TEST(ProcessGroups, SeedEtp2Ep2) {
  const ProcessGroups g(ParallelLayout{.world = 4, .ep = 2, .etp = 2});
  EXPECT_EQ(g.all_groups(GroupKind::expt_tp), (Groups{{0, 1}, {2, 3}}));
  EXPECT_EQ(g.all_groups(GroupKind::ep), (Groups{{0, 2}, {1, 3}}));
  EXPECT_EQ(g.all_groups(GroupKind::tp_ep), (Groups{{0, 1, 2, 3}}));
  // Ranks 0 and 1 hold different slices of the same experts.
  EXPECT_EQ(g.experts_of(0, 4), g.experts_of(1, 4));
  EXPECT_NE(g.experts_of(0, 4), g.experts_of(2, 4));
}

// Megatron-Core's parallel_state.py, world 16, TP2 PP2 EP4 ETP1 (dp = 16/(2·2) = 4, edp = 16/(4·2) = 2).
TEST(ProcessGroups, MegatronSixteenRankExample) {
  const ProcessGroups g(ParallelLayout{.world = 16, .tp = 2, .pp = 2, .ep = 4});
  EXPECT_EQ(g.all_groups(GroupKind::tp),
            (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  EXPECT_EQ(g.all_groups(GroupKind::dp), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}, {8, 10, 12, 14}, {9, 11, 13, 15}}));
  EXPECT_EQ(g.all_groups(GroupKind::pp),
            (Groups{{0, 8}, {1, 9}, {2, 10}, {3, 11}, {4, 12}, {5, 13}, {6, 14}, {7, 15}}));
  EXPECT_EQ(g.all_groups(GroupKind::ep), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}, {12, 13, 14, 15}}));
  EXPECT_EQ(g.all_groups(GroupKind::expt_dp),
            (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}, {8, 12}, {9, 13}, {10, 14}, {11, 15}}));
  Groups singletons;
  for (int r = 0; r < 16; ++r) singletons.push_back({r});
  EXPECT_EQ(g.all_groups(GroupKind::expt_tp), singletons);
}

// Megatron-Core 0.19.2's initialize_model_parallel (run with a recording torch.distributed), world 16, TP2 ETP2
// EP2 GTP2 EGTP2: dense order tp-gtp_remat-cp-ep-dp-pp, expert order tp-cp-ep-gtp_remat-dp-pp. The groups of
// ranks 0 and 5 as it built them; megatron_bridge/group_checks.py compares every rank against it in CI.
TEST(ProcessGroups, MegatronGtpExample) {
  const ProcessGroups g(ParallelLayout{.world = 16, .tp = 2, .ep = 2, .etp = 2, .gtp = 2, .egtp = 2});
  using V = std::vector<int>;
  EXPECT_EQ(g.group(GroupKind::tp, 0), (V{0, 1}));
  EXPECT_EQ(g.group(GroupKind::gtp, 0), (V{0, 2}));
  EXPECT_EQ(g.group(GroupKind::dp, 0), (V{0, 4, 8, 12}));
  EXPECT_EQ(g.group(GroupKind::dp_gtp, 0), (V{0, 2, 4, 6, 8, 10, 12, 14}));
  EXPECT_EQ(g.group(GroupKind::ep, 0), (V{0, 2}));
  EXPECT_EQ(g.group(GroupKind::expt_gtp, 0), (V{0, 4}));
  EXPECT_EQ(g.group(GroupKind::expt_dp, 0), (V{0, 8}));
  EXPECT_EQ(g.group(GroupKind::expt_dp_gtp, 0), (V{0, 4, 8, 12}));
  EXPECT_EQ(g.group(GroupKind::tp, 5), (V{4, 5}));
  EXPECT_EQ(g.group(GroupKind::gtp, 5), (V{5, 7}));
  EXPECT_EQ(g.group(GroupKind::expt_gtp, 5), (V{1, 5}));
  EXPECT_EQ(g.group(GroupKind::expt_dp, 5), (V{5, 13}));
  EXPECT_EQ(g.group(GroupKind::ep, 5), (V{5, 7}));
}

// Every kind of group partitions the world, and each group's size is the product of its axes.
TEST(ProcessGroups, GroupsPartitionTheWorld) {
  for (const auto& l : {ParallelLayout{.world = 16, .tp = 2, .pp = 2, .ep = 4},
                        ParallelLayout{.world = 48, .tp = 2, .cp = 3, .pp = 2, .ep = 4, .etp = 2},
                        ParallelLayout{.world = 32, .cp = 2, .pp = 2, .ep = 8, .etp = 2},
                        ParallelLayout{.world = 96, .tp = 2, .cp = 2, .pp = 2, .ep = 4, .etp = 1, .gtp = 3,
                                       .egtp = 2}}) {
    const ProcessGroups g(l);
    const int dp = l.dp(), edp = l.edp();
    for (GroupKind kind : all_group_kinds()) {
      std::vector<int> seen(static_cast<std::size_t>(l.world), 0);
      for (const auto& group : g.all_groups(kind))
        for (int r : group) ++seen[static_cast<std::size_t>(r)];
      EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; })) << to_string(kind);
    }
    EXPECT_EQ(g.group(GroupKind::dp_cp, 0).size(), static_cast<std::size_t>(dp * l.cp));
    EXPECT_EQ(g.group(GroupKind::tp_cp, 0).size(), static_cast<std::size_t>(l.tp * l.cp));
    EXPECT_EQ(g.group(GroupKind::tp_dp_cp, 0).size(), static_cast<std::size_t>(l.tp * l.gtp * dp * l.cp));
    EXPECT_EQ(g.group(GroupKind::gtp, 0).size(), static_cast<std::size_t>(l.gtp));
    EXPECT_EQ(g.group(GroupKind::dp_cp_gtp, 0).size(), static_cast<std::size_t>(dp * l.cp * l.gtp));
    EXPECT_EQ(g.group(GroupKind::expt_gtp, 0).size(), static_cast<std::size_t>(l.egtp));
    EXPECT_EQ(g.group(GroupKind::expt_dp_gtp, 0).size(), static_cast<std::size_t>(edp * l.egtp));
    EXPECT_EQ(g.group(GroupKind::tp_ep, 0).size(), static_cast<std::size_t>(l.etp * l.ep));
    EXPECT_EQ(g.group(GroupKind::expt_dp, 0).size(), static_cast<std::size_t>(edp));
    EXPECT_EQ(g.group(GroupKind::pp, 0).size(), static_cast<std::size_t>(l.pp));
  }
}

TEST(ProcessGroups, RejectsInvalidLayoutsAndPlacements) {
  EXPECT_THROW(ProcessGroups(ParallelLayout{.world = 1000, .cp = 2, .pp = 8, .ep = 64}), std::invalid_argument);
  try {
    local_experts(384, 5, 0);
    FAIL() << "accepted 384 experts over EP5";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("num_experts (384) must be divisible by ep (5)"), std::string::npos);
  }
  EXPECT_THROW(local_experts(384, 64, 64), std::invalid_argument);
}

}  // namespace
}  // namespace moe
