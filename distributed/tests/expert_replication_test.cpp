// The replicated-experts planner (distributed/train/expert_replication.hpp) on counts whose best plans are worked
// out by hand; the replicas' numbers are checked against the oracle by `check` and TrainStep.ReplicatedExperts….
#include "distributed/train/expert_replication.hpp"

#include "distributed/comm/inproc_world.hpp"

#include <gtest/gtest.h>

namespace moe::dist {
namespace {

using Replicas = std::vector<std::vector<int>>;

TEST(ReplicatedExperts, PartsAreContiguousAndCoverTheRows) {
  for (std::int64_t n : {0, 1, 5, 100})
    for (int parts = 1; parts <= 4; ++parts) {
      std::int64_t at = 0;
      for (int j = 0; j < parts; ++j) {
        const RowRange r = part_of(n, parts, j);
        EXPECT_EQ(r.begin, at);
        EXPECT_LE(r.end - r.begin, n / parts + 1);
        at = r.end;
      }
      EXPECT_EQ(at, n);
    }
}

// One hot expert on 4 ranks: 100 rows on rank 0, nothing elsewhere. Copy 1 on rank 1 ([50, 50, 0, 0]), copy 2 on
// rank 2 ([33, 33, 34, 0]), then rank 2 is the busiest and its largest part is expert 0's: copy 3 on rank 3
// ([25, 25, 25, 25]). A fourth slot finds no rank without a copy.
TEST(ReplicatedExperts, OneHotExpertSpreadsOverEveryRank) {
  EXPECT_EQ(plan_replicas({100, 0, 0, 0}, 4, 1).replicas, (Replicas{{1}, {}, {}, {}}));
  EXPECT_EQ(plan_replicas({100, 0, 0, 0}, 4, 2).replicas, (Replicas{{1, 2}, {}, {}, {}}));
  EXPECT_EQ(plan_replicas({100, 0, 0, 0}, 4, 3).replicas, (Replicas{{1, 2, 3}, {}, {}, {}}));
  EXPECT_EQ(plan_replicas({100, 0, 0, 0}, 4, 9).slots(), 3);
}

// 2 experts per rank on 2 ranks, loads [10 + 2, 3 + 1] = [12, 4]: expert 0 (10 rows) gets a copy on rank 1, giving
// [5 + 2, 5 + 4] = [7, 9]; then rank 1's largest part is expert 0's 5 rows, and no rank lacks a copy of it: done.
TEST(ReplicatedExperts, StopsWhenNoCopyHelps) {
  const ReplicationPlan plan = plan_replicas({10, 2, 3, 1}, 2, 4);
  EXPECT_EQ(plan.replicas, (Replicas{{1}, {}, {}, {}}));
  // Balanced counts: nothing to gain.
  EXPECT_TRUE(plan_replicas({4, 4, 4, 4}, 4, 4).empty());
  EXPECT_TRUE(plan_replicas({7, 1}, 1, 4).empty());  // one EP rank: nowhere to copy to
}

TEST(ReplicatedExperts, RefusesCountsThatTheLayoutCannotHold) {
  EXPECT_THROW(plan_replicas({1, 2, 3}, 2, 1), std::invalid_argument);
  EXPECT_THROW(plan_replicas({1, 2}, 2, -1), std::invalid_argument);
}

// A plan that is not one part per (expert, rank) is refused before any row moves: a copy on the owner, a rank
// twice, a rank outside the group.
TEST(ReplicatedExperts, RefusesPlansThatAreNotOnePartPerRank) {
  InprocWorld(2).run([&](Communicator& ep) {
    for (const Replicas& bad : {Replicas{{0}, {}}, Replicas{{}, {1}}, Replicas{{1, 1}, {}}, Replicas{{2}, {}}}) {
      ReplicationPlan plan;
      plan.replicas = bad;
      EXPECT_THROW(ExpertReplicas<double>(plan, ep, 2, cpu_kernels(), {}), std::invalid_argument);
    }
    ReplicationPlan ok;
    ok.replicas = {{1}, {0}};
    EXPECT_NO_THROW(ExpertReplicas<double>(ok, ep, 2, cpu_kernels(), {}));
  });
}

}  // namespace
}  // namespace moe::dist
