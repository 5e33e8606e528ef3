// A distributed optimizer's step dump (grad_ranges, compare/grad_ranges.hpp): the committed TP 2 × EP 2 megatron-core
// step rewritten as if each data-parallel group's ranks had reduce-scattered every gradient, each keeping a
// contiguous part of every shard (and of Adam's moments), passes; a part nothing holds, two ranks holding one element, or a range outside
// its shard are refused; a wrong value fails at its index in the shard.
#include "compare/grad_ranges.hpp"
#include "compare/step_dump.hpp"
#include "compare/tests/step_dump_copy.hpp"

#include "formats/npy.hpp"
#include "reference/process_groups.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>

namespace moe::compare {
namespace {

namespace fs = std::filesystem;

TEST(GradRangeTiling, AcceptsExactTilesAndNamesGapsAndOverlaps) {
  GradRangeTiling exact;
  exact.add("w", 10, {4, 10}, 1);
  exact.add("w", 10, {0, 4}, 0);
  EXPECT_EQ(exact.check(), "");
  GradRangeTiling gap;
  gap.add("w", 10, {0, 4}, 0);
  gap.add("w", 10, {5, 10}, 1);
  EXPECT_NE(gap.check().find("elements [4, 5) are held by no rank"), std::string::npos);
  GradRangeTiling overlap;
  overlap.add("w", 10, {0, 6}, 0);
  overlap.add("w", 10, {5, 10}, 1);
  EXPECT_NE(overlap.check().find("rank 1's range [5, 10) overlaps"), std::string::npos);
  GradRangeTiling short_end;
  short_end.add("w", 10, {0, 9}, 0);
  EXPECT_NE(short_end.check().find("the ranges end at 9, the shard has 10"), std::string::npos);
}

TEST(GradRanges, ReadsOneMapPerRankAndRefusesOtherShapes) {
  const auto two = read_grad_ranges(nlohmann::json::parse(R"([{"head": [0, 4]}, {"head": [4, 8]}])"), 2, "s");
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[1].at("head").start, 4);
  EXPECT_EQ(two[1].at("head").size(), 4);
  const auto refusal = [](const char* text, int world) {
    try {
      read_grad_ranges(nlohmann::json::parse(text), world, "s");
    } catch (const DumpError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(refusal(R"([{"head": [0, 4]}])", 2).find("one object per rank (2)"), std::string::npos);
  EXPECT_NE(refusal(R"([{"head": [4, 4]}])", 1).find("is not a range"), std::string::npos);
  EXPECT_NE(refusal(R"([{"head": [0.5, 4]}])", 1).find("is not a range"), std::string::npos);
}

// The committed dump with every gradient split over its data-parallel group as a distributed optimizer splits it,
// evenly (even_grad_range).
class DistributedOptimizerCopy : public test::StepDumpCopy {
 protected:
  fs::path source() const override { return fs::path(COMPARE_DATA_DIR) / "megatron_step_tp2_ep2"; }
  void SetUp() override {
    StepDumpCopy::SetUp();
    nlohmann::json j = meta();
    const StepDump whole = read_step_dump(dir_, {"", Precision::float32});
    const ProcessGroups groups(whole.layout);
    nlohmann::json ranges = nlohmann::json::array();
    for (int r = 0; r < whole.layout.world; ++r) {
      nlohmann::json mine = nlohmann::json::object();
      for (const auto& [stem, grad] : whole.grads[static_cast<size_t>(r)]) {
        const std::vector<int> group = groups.group(optimizer_group(stem), r);
        const auto p = static_cast<int>(std::find(group.begin(), group.end(), r) - group.begin());
        const auto [start, end] = even_grad_range(static_cast<std::int64_t>(grad.reals.size()), p,
                                                  static_cast<int>(group.size()));
        // The gradient and Adam's moments (held as the gradient is), each cut to the range.
        const auto cut = [&, start = start, end = end](const formats::NpyArray& whole_array, const std::string& file) {
          formats::NpyArray part = whole_array;
          part.shape = {end - start};
          part.reals.assign(whole_array.reals.begin() + start, whole_array.reals.begin() + end);
          formats::write_npy(dir_ / ("rank" + std::to_string(r)) / (file + ".npy"), part);
        };
        cut(grad, "grad." + stem);
        for (const std::string moment : {"exp_avg.", "exp_avg_sq."})
          cut(whole.state[static_cast<size_t>(r)].at(moment + stem), "state." + moment + stem);
        mine[stem] = {start, end};
        if (group.size() > 1) split_ = true;
      }
      ranges.push_back(mine);
    }
    j["grad_ranges"] = ranges;
    write_meta(j);
  }
  bool split_ = false;  // some parameter's gradient is split over more than one rank
};

TEST_F(DistributedOptimizerCopy, RangesThatTileEveryShardPass) {
  ASSERT_TRUE(split_);
  const StepComparison c = judged();
  EXPECT_TRUE(c.pass());
  EXPECT_FALSE(c.tensors.empty());
}

TEST_F(DistributedOptimizerCopy, AWrongElementFailsAtItsIndexInTheShard) {
  nlohmann::json j = meta();
  const auto range = j["grad_ranges"][1]["head"];
  add(dir_ / "rank1" / "grad.head.npy", 2, 0.5);
  const StepComparison c = judged();
  EXPECT_FALSE(c.pass());
  const StepTensorResult* fail = c.first_failure();
  ASSERT_NE(fail, nullptr);
  EXPECT_EQ(fail->stem, "head");
  EXPECT_EQ(fail->first_rank, 1);
  EXPECT_EQ(fail->first_index, range[0].get<std::int64_t>() + 2);
}

TEST_F(DistributedOptimizerCopy, APartNoRankHoldsIsRefused) {
  nlohmann::json j = meta();
  j["grad_ranges"][1].erase("head");
  write_meta(j);
  for (const char* file : {"grad.head.npy", "state.exp_avg.head.npy", "state.exp_avg_sq.head.npy"})
    fs::remove(dir_ / "rank1" / file);
  EXPECT_NE(refusal().find("are held by no rank"), std::string::npos);
}

TEST_F(DistributedOptimizerCopy, OverlapsAndRangesOutsideTheShardAreRefused) {
  nlohmann::json j = meta();
  const nlohmann::json saved = j["grad_ranges"][0]["final_norm"];
  j["grad_ranges"][0]["final_norm"] = {0, 100};
  write_meta(j);
  EXPECT_NE(refusal().find("is outside its shard of 8 elements"), std::string::npos);
  j["grad_ranges"][0]["final_norm"] = saved;
  j["grad_ranges"][0]["no_such_parameter"] = {0, 1};
  write_meta(j);
  EXPECT_NE(refusal().find("holds no such parameter"), std::string::npos);
}

}  // namespace
}  // namespace moe::compare
