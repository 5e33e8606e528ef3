#include "reference/rank_generator.hpp"
#include "reference/tests/expect_error.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

namespace moe {
namespace {

using Groups = std::vector<std::vector<int>>;

void expect_rule(const std::string& fragment, auto&& make) { test::expect_error(fragment, make); }

// tp = 2, dp = 2. With "tp-dp" the first token varies fastest: rank = tp_idx + 2·dp_idx, so tp groups are pairs
// of neighbours. Reversing the order makes dp fastest: rank = dp_idx + 2·tp_idx.
TEST(RankGenerator, FirstOrderTokenVariesFastest) {
  const RankGenerator tp_first(2, 1, 2, 1, 1, "tp-dp");
  EXPECT_EQ(tp_first.rank_groups("tp"), (Groups{{0, 1}, {2, 3}}));
  EXPECT_EQ(tp_first.rank_groups("dp"), (Groups{{0, 2}, {1, 3}}));
  const RankGenerator dp_first(2, 1, 2, 1, 1, "dp-tp");
  EXPECT_EQ(dp_first.rank_groups("tp"), (Groups{{0, 2}, {1, 3}}));
  EXPECT_EQ(dp_first.rank_groups("dp"), (Groups{{0, 1}, {2, 3}}));
}

TEST(RankGenerator, AppendsOmittedSizeOneAxes) {
  const RankGenerator g(2, 1, 2, 1, 1, "tp-dp");
  ASSERT_EQ(g.order().size(), 6u);  // tp, dp, then cp, ep, pp and gtp_remat of size 1
  EXPECT_EQ(g.order()[0], "tp");
  EXPECT_EQ(g.order()[1], "dp");
  for (std::size_t i = 2; i < 6; ++i) EXPECT_EQ(g.sizes()[i], 1) << g.order()[i];
  EXPECT_EQ(g.world_size(), 4);
  // An omitted size-1 axis still names a (singleton) group.
  EXPECT_EQ(g.rank_groups("ep"), (Groups{{0}, {1}, {2}, {3}}));
}

// tp = cp = dp = 2 in order tp-cp-dp: strides 1, 2, 4. The group 'tp-dp' fixes cp and runs tp fastest, then dp:
// for cp = 0 that is {0, 1, 4, 5}, for cp = 1 {2, 3, 6, 7}. The token set's own spelling order does not matter.
TEST(RankGenerator, MultiTokenGroupsRunMaskedAxesInMeshOrder) {
  const RankGenerator g(2, 1, 2, 1, 2, "tp-cp-dp");
  EXPECT_EQ(g.rank_groups("tp-dp"), (Groups{{0, 1, 4, 5}, {2, 3, 6, 7}}));
  EXPECT_EQ(g.rank_groups("dp-tp"), g.rank_groups("tp-dp"));
  EXPECT_EQ(g.group_of(6, "tp-dp"), (std::vector<int>{2, 3, 6, 7}));
}

TEST(RankGenerator, GroupOfAgreesWithTheListing) {
  const std::vector<RankGenerator> meshes = {RankGenerator(2, 1, 3, 2, 2, "tp-cp-ep-dp-pp"),
                                             RankGenerator(1, 4, 2, 2, 1, "tp-cp-ep-dp-pp"),
                                             RankGenerator(2, 2, 2, 1, 1, "dp-ep-tp")};
  const std::vector<std::string> sets = {"tp", "cp", "ep", "dp", "pp", "tp-cp", "dp-cp", "tp-ep", "tp-dp-cp"};
  for (const auto& g : meshes) {
    for (const auto& set : sets) {
      const auto groups = g.rank_groups(set);
      std::vector<int> seen(static_cast<std::size_t>(g.world_size()), 0);
      for (const auto& group : groups) {
        for (int r : group) {
          ++seen[static_cast<std::size_t>(r)];
          EXPECT_EQ(g.group_of(r, set), group) << set << " rank " << r;
        }
      }
      // The groups of one token set partition the world.
      EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; })) << set;
    }
  }
}

TEST(RankGenerator, RejectsBadOrdersAndGroups) {
  expect_rule("ep has size 2 but is missing from the order", [] { RankGenerator(2, 2, 1, 1, 1, "tp-dp"); });
  expect_rule("token 'xp' in 'tp-xp' is not one of", [] { RankGenerator(1, 1, 1, 1, 1, "tp-xp"); });
  expect_rule("token 'tp' appears more than once", [] { RankGenerator(1, 1, 1, 1, 1, "tp-dp-tp"); });
  expect_rule("dp size must be >= 1", [] { RankGenerator(1, 1, 0, 1, 1, "tp-dp"); });
  const RankGenerator g(2, 1, 2, 1, 1, "tp-dp");
  expect_rule("token 'etp' of group 'etp' is not one of", [&] { g.rank_groups("etp"); });
  expect_rule("rank 4 is outside the world of 4 ranks", [&] { g.group_of(4, "tp"); });
}

}  // namespace
}  // namespace moe
