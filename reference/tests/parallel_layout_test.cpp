#include "reference/parallel_layout.hpp"
#include "reference/tests/expect_error.hpp"
#include "reference/tests/seed_layout.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

namespace moe {
namespace {

using test::seed_layout;

void expect_rule(const ParallelLayout& l, const std::string& fragment) {
  const std::string what = test::expect_error(fragment, [&] { l.validate(); });
  if (!what.empty()) {
    EXPECT_NE(what.find("invalid parallel layout"), std::string::npos) << what;
  }
}

// D_a = N/(TP·CP·PP) = 1024/(1·2·8) = 64; EDP = N/(ETP·EP·PP) = 1024/(1·64·8) = 2.
TEST(ParallelLayout, SeedLayoutDerivesDpAndEdp) {
  const auto l = seed_layout();
  EXPECT_NO_THROW(l.validate());
  EXPECT_EQ(l.dp(), 64);
  EXPECT_EQ(l.edp(), 2);
}

TEST(ParallelLayout, RejectsBrokenRules) {
  auto l = seed_layout();
  l.world = 1000;  // 1000 / 16 is not an integer
  expect_rule(l, "must be divisible by tp·cp·pp (16)");

  l = seed_layout();
  l.ep = 48;  // 1024 / (48·8) is not an integer, 1024 / 16 is
  expect_rule(l, "must be divisible by etp·ep·pp (384)");

  l = seed_layout();
  l.tp = 0;
  expect_rule(l, "must be >= 1");

  l = seed_layout();
  l.gtp = 2;
  l.validate();  // the meshes take it: 1024 = 1·2·32·8·2

  l = seed_layout();
  l.egtp = 3;
  try {
    l.validate();
    FAIL() << "accepted egtp 3 on 1024 ranks";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("divisible by etp·ep·pp·egtp (1536)"), std::string::npos) << e.what();
  }

  l = seed_layout();
  l.order = "tp-cp-xp-dp-pp";
  expect_rule(l, "token 'xp'");

  l = seed_layout();
  l.order = "tp-cp-ep-dp-cp";
  expect_rule(l, "token 'cp' appears more than once");

  l = seed_layout();
  l.order = "tp-ep-dp-pp";  // cp = 2 must be placed
  expect_rule(l, "cp has size 2 but is missing");
}

// world 16, TP2 PP2 EP4 ETP1 gives dp = 4, edp = 2: Megatron only allows that when pp is the slowest axis.
TEST(ParallelLayout, DifferentDpAndEdpNeedPpLast) {
  ParallelLayout l;
  l.world = 16;
  l.tp = 2;
  l.pp = 2;
  l.ep = 4;
  EXPECT_NO_THROW(l.validate());
  l.order = "tp-cp-ep-pp-dp";
  expect_rule(l, "dp (4) must equal edp (2) unless the order ends in pp");
}

// world 8, TP2 PP2 EP2 ETP1, order tp-pp-ep-dp-cp (dp = edp = 2). Dense strides: tp 1, pp 2, so rank 0's pp group
// is {0, 2}; expert strides: tp(=1) 1, pp 1, so it is {0, 1}. A stage would differ between the two meshes.
TEST(ParallelLayout, RejectsUnequalPpGroups) {
  ParallelLayout l;
  l.world = 8;
  l.tp = 2;
  l.pp = 2;
  l.ep = 2;
  l.order = "tp-pp-ep-dp-cp";
  ASSERT_EQ(l.dp(), l.edp());
  expect_rule(l, "equal pp groups");
  // With tp = etp the strides agree and the same order is fine.
  l.etp = 2;
  l.ep = 1;
  EXPECT_NO_THROW(l.validate());
}

// validate() checks the pipeline rule by comparing the two meshes' pp strides instead of listing every pp group.
// On every layout of up to 16 ranks, every order of the five axes, the stride rule must give what listing the groups
// gives: a layout validate() accepts has equal listed groups, and one it refuses for the pp rule has different ones.
TEST(ParallelLayout, PpStrideRuleEqualsListedGroups) {
  std::vector<std::string> orders;
  std::vector<std::string> axes = {"cp", "dp", "ep", "pp", "tp"};
  std::sort(axes.begin(), axes.end());
  do {
    orders.push_back(axes[0] + "-" + axes[1] + "-" + axes[2] + "-" + axes[3] + "-" + axes[4]);
  } while (std::next_permutation(axes.begin(), axes.end()));
  int accepted = 0, refused_for_pp = 0;
  for (int world = 1; world <= 16; ++world)
    for (int tp = 1; tp <= world; ++tp)
      for (int pp = 2; pp <= world; ++pp)
        for (int ep = 1; ep <= world; ++ep)
          for (int etp = 1; etp <= world; ++etp)
            for (int cp : {1, 2}) {
              if (world % (tp * cp * pp) != 0 || world % (etp * ep * pp) != 0) continue;
              for (const std::string& o : orders) {
                ParallelLayout l;
                l.world = world;
                l.tp = tp;
                l.cp = cp;
                l.pp = pp;
                l.ep = ep;
                l.etp = etp;
                l.order = o;
                bool ok = true;
                try {
                  l.validate();
                } catch (const std::invalid_argument& e) {
                  if (std::string(e.what()).find("equal pp groups") == std::string::npos) continue;
                  ok = false;
                }
                const bool listed_equal = l.dense_mesh().rank_groups("pp") == l.expert_mesh().rank_groups("pp");
                EXPECT_EQ(ok, listed_equal) << "world " << world << " tp " << tp << " cp " << cp << " pp " << pp
                                            << " ep " << ep << " etp " << etp << " order " << o;
                (ok ? accepted : refused_for_pp)++;
              }
            }
  // Both outcomes occur, so the comparison above is not vacuous.
  EXPECT_GT(accepted, 100);
  EXPECT_GT(refused_for_pp, 100);
}

// m = B/(b·D_a) = 4096/(1·64) = 64 (docs/parallelism.md: CP, EP and ETP do not enter m); not 4096/(1·2) with EDP.
TEST(ParallelLayout, MicrobatchesFollowAttentionDp) {
  const auto l = seed_layout();
  EXPECT_EQ(num_microbatches(l, 4096, 1), 64);
  EXPECT_EQ(num_microbatches(l, 4096, 2), 32);
  try {
    num_microbatches(l, 4096, 3);  // 3·64 = 192 does not divide 4096
    FAIL() << "accepted b·dp not dividing B";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("must be divisible by micro_batch·dp (192)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(num_microbatches(l, 0, 1), std::invalid_argument);
}

}  // namespace
}  // namespace moe

namespace moe {
namespace {

// Megatron's _inject_gtp_remat_axis: after tp in the dense order, after ep in the expert order, unless the order
// names the axis itself; without the anchor, after tp, and first without either.
TEST(ParallelLayout, GtpAxisGoesAfterTpDenseAndAfterEpExpert) {
  ParallelLayout l{.world = 16, .tp = 2, .ep = 2, .etp = 2, .gtp = 2, .egtp = 2};
  EXPECT_EQ(l.dense_order(), "tp-gtp_remat-cp-ep-dp-pp");
  EXPECT_EQ(l.expert_order(), "tp-cp-ep-gtp_remat-dp-pp");
  l.order = "dp-ep-gtp_remat-tp-cp-pp";
  EXPECT_EQ(l.dense_order(), l.order);
  EXPECT_EQ(l.expert_order(), l.order);
  l.order = "cp-dp";
  EXPECT_EQ(l.expert_order(), "gtp_remat-cp-dp");
  // dp counts the replicas of a weight shard; dp·gtp the ranks of distinct samples, which split the batch.
  l = ParallelLayout{.world = 16, .tp = 2, .gtp = 2};
  EXPECT_EQ(l.dp(), 4);
  EXPECT_EQ(l.dp_with_gtp(), 8);
  EXPECT_EQ(num_microbatches(l, 16, 1), 2);
  EXPECT_THROW(num_microbatches(l, 12, 1), std::invalid_argument);
}

}  // namespace
}  // namespace moe
