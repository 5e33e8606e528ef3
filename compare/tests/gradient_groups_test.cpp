// compare on a dump with several gradient groups: megatron-core 0.19.2's layer on four ranks with EP 2 (two
// expert-data-parallel copies of every expert, each holding its own group's gradient; four replicas of the router
// and the shared expert), top-1 with the router's probability applied on the expert input, float32 (written by
// megatron_bridge/driver.py from data/megatron_dp4_edp2_probs_on_input/case.json). Every copy is compared, not only
// the first group's; the claimed place of the probability is the one the oracle runs.
#include "compare/dump_oracle.hpp"
#include "compare/tests/dump_copy.hpp"

#include <set>

namespace moe::compare {
namespace {

namespace fs = std::filesystem;

const fs::path kGroupsDump = fs::path(COMPARE_DATA_DIR) / "megatron_dp4_edp2_probs_on_input";

class GroupsDumpCopy : public test::DumpCopy {
 protected:
  fs::path source() const override { return kGroupsDump; }
};

const TensorResult& tensor_named(const Comparison& c, const std::string& name) {
  for (const auto& t : c.tensors)
    if (t.tensor == name) return t;
  throw std::runtime_error("no tensor " + name);
}

TEST(CompareGradientGroups, MegatronsDumpWithTwoExpertGroupsPasses) {
  const Dump dump = read_dump(kGroupsDump);
  EXPECT_EQ(dump.layout.world, 4);
  EXPECT_EQ(dump.layout.ep, 2);
  EXPECT_TRUE(dump.config.apply_probs_on_input);
  EXPECT_EQ(dump.config.topk, 1);
  const Comparison c = compare_dump(dump);
  EXPECT_TRUE(c.pass());
  EXPECT_TRUE(c.absent.empty());
  std::set<std::string> names;
  for (const auto& t : c.tensors) names.insert(t.tensor);
  for (const char* must : {"output", "hidden_states.grad", "router.probs", "router.routing_map", "aux_loss", "z_loss",
                           "router.weight.grad", "experts.local_experts.0.linear_fc1.weight.grad",
                           "experts.local_experts.1.linear_fc2.weight.grad", "shared_experts.linear_fc1.weight.grad"})
    EXPECT_TRUE(names.count(must)) << must;
  // float32's rounding is there to see: the comparison is not vacuous.
  EXPECT_GT(tensor_named(c, "shared_experts.linear_fc1.weight.grad").max_abs, 1e-8);
}

// An outlier in the second group's copy of an expert's gradient, every other element exact as Megatron wrote it: a
// compare that judged one copy per expert (the first group's) would pass it.
TEST_F(GroupsDumpCopy, AnOutlierInTheSecondGroupsCopyFails) {
  for (const int rank : {2, 3}) {
    SCOPED_TRACE(rank);
    fs::remove_all(dir_);
    fs::copy(kGroupsDump, dir_, fs::copy_options::recursive);
    const std::string file = "rank" + std::to_string(rank) + "/experts.local_experts.1.linear_fc1.weight.grad.npy";
    auto g = read(file);
    g.reals[7] += 1e-3 * (1 + std::abs(g.reals[7]));
    write(file, g);
    const Comparison c = compare_dump(read_dump(dir_));
    ASSERT_FALSE(c.pass());
    const TensorResult* first = c.first_failure();
    EXPECT_EQ(first->tensor, "experts.local_experts.1.linear_fc1.weight.grad");
    EXPECT_EQ(first->first->rank, rank);
    EXPECT_EQ(first->first->index, 7);
  }
}

// The router's gradient is the sum of four replicas' parts: an outlier in the last replica's part fails the sum.
TEST_F(GroupsDumpCopy, AnOutlierInOneReplicasRouterGradientFailsTheSum) {
  auto g = read("rank3/router.weight.grad.npy");
  g.reals[5] += 1e-3 * (1 + std::abs(g.reals[5]));
  write("rank3/router.weight.grad.npy", g);
  const Comparison c = compare_dump(read_dump(dir_));
  ASSERT_FALSE(c.pass());
  EXPECT_EQ(c.first_failure()->tensor, "router.weight.grad");
  EXPECT_EQ(c.first_failure()->first->index, 5);
}

// Claiming the probability on the expert's output instead: the oracle then computes p·expert(x), not expert(p·x),
// and the same files fail from the output on.
TEST_F(GroupsDumpCopy, TheProbabilitysPlaceIsTheClaimedOne) {
  auto j = meta();
  j["config"]["apply_probs_on_input"] = false;
  write_meta(j);
  const Comparison c = compare_dump(read_dump(dir_));
  EXPECT_FALSE(c.pass());
  EXPECT_FALSE(tensor_named(c, "output").pass());
}

}  // namespace
}  // namespace moe::compare
