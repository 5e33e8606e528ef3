// Comparing dumps with the oracle: a real float32 dump of megatron-core 0.19.2's MoE layer (world 2, EP 2, written
// by megatron_bridge/driver.py) passes; a changed value fails naming the tensor, rank and index; a missing tensor is
// listed, not failed; every malformed dump is refused with one line naming the file and the problem.
#include "compare/dump_oracle.hpp"
#include "compare/tests/dump_copy.hpp"

#include <set>

namespace moe::compare {
namespace {

using test::DumpCopy;
using test::kMegatronDump;
namespace fs = std::filesystem;

TEST(CompareMegatron, Float32DumpOfMegatronCorePasses) {
  const Dump dump = read_dump(kMegatronDump);
  EXPECT_EQ(dump.precision, Precision::float32);
  EXPECT_EQ(dump.layout.ep, 2);
  const Comparison c = compare_dump(dump);
  EXPECT_TRUE(c.pass());
  EXPECT_TRUE(c.absent.empty());
  std::set<std::string> names;
  for (const auto& t : c.tensors) names.insert(t.tensor);
  for (const char* must : {"output", "hidden_states.grad", "router.probs", "router.routing_map", "aux_loss",
                           "router.local_tokens_per_expert", "router.weight.grad",
                           "experts.local_experts.1.linear_fc1.weight.grad", "shared_experts.linear_fc2.weight.grad"})
    EXPECT_TRUE(names.count(must)) << must;
  // Its errors are float32's, not zero: the comparison is not vacuous.
  double worst = 0;
  for (const auto& t : c.tensors) worst = std::max(worst, t.max_abs);
  EXPECT_GT(worst, 1e-9);
}

// The progress a command shows counts every step compare makes: one per expert and one for the layer around them,
// whether or not the bf16 error model's second oracle runs (it runs in the same visit of each expert).
TEST(CompareMegatron, ProgressCountsEveryStep) {
  for (const std::optional<Precision> precision : {std::optional<Precision>{}, std::optional{Precision::bfloat16}}) {
    const Dump dump = read_dump(kMegatronDump, {"", precision});
    int calls = 0;
    (void)compare_dump(dump, ExpertPath::expert_batched, [&calls] { ++calls; });
    EXPECT_EQ(calls, compare_steps(dump)) << to_string(dump.precision);
    EXPECT_EQ(calls, dump.config.num_experts + 1) << to_string(dump.precision);
  }
}

TEST_F(DumpCopy, ChangedValueFailsNamingTensorRankAndIndex) {
  auto out = read("rank1/output.npy");
  out.reals[5] = static_cast<float>(out.reals[5] + 1e-2);
  write("rank1/output.npy", out);
  const Comparison c = compare_dump(read_dump(dir_));
  ASSERT_FALSE(c.pass());
  const TensorResult* first = c.first_failure();
  EXPECT_EQ(first->tensor, "output");
  EXPECT_EQ(first->first->rank, 1);
  EXPECT_EQ(first->first->index, 5);
}

const TensorResult& tensor_named(const Comparison& c, const std::string& name) {
  for (const auto& t : c.tensors)
    if (t.tensor == name) return t;
  throw std::runtime_error("no tensor " + name);
}

// A routing map row changed by hand selects an expert far below the k-th: a difference beyond the router's rounding,
// not replayed, counted and reported with its rank, row and margin.
TEST_F(DumpCopy, ARoutingMapRowChangedByHandIsBeyondRounding) {
  auto map = read("rank0/router.routing_map.npy");
  const auto E = static_cast<size_t>(map.shape[1]);
  size_t on = 0, off = 0;
  while (!map.booleans[on]) ++on;
  while (map.booleans[off]) ++off;
  ASSERT_LT(on, E);
  ASSERT_LT(off, E);
  std::swap(map.booleans[on], map.booleans[off]);
  write("rank0/router.routing_map.npy", map);
  const Comparison c = compare_dump(read_dump(dir_));
  const TensorResult& t = tensor_named(c, "router.routing_map");
  EXPECT_FALSE(t.pass());
  EXPECT_EQ(t.rows_differing, 1);
  EXPECT_TRUE(c.replay.possible);
  EXPECT_EQ(c.replay.replayed, 0);
  ASSERT_EQ(c.replay.beyond_rounding.size(), 1u);
  EXPECT_EQ(c.replay.beyond_rounding[0].rank, 0);
  EXPECT_EQ(c.replay.beyond_rounding[0].row, 0);
  EXPECT_GT(c.replay.beyond_rounding[0].margin, c.replay.beyond_rounding[0].bound);
}

// With two experts' router rows and biases made equal, every token ranks them exactly alike: where one of them is
// the k-th choice the oracle's selection is a tie the lower index wins, and the dump (routed before the change) took
// the other on some of those rows. Margin 0: within any rounding, so those rows are replayed, not failed.
TEST_F(DumpCopy, ExactTiesAreReplayed) {
  for (const char* rank : {"rank0", "rank1"}) {
    auto w = read(std::string(rank) + "/router.weight.npy");  // [E, h]
    const auto h = static_cast<size_t>(w.shape[1]);
    for (size_t i = 0; i < h; ++i) w.reals[h + i] = w.reals[i];  // expert 1 ranks as expert 0 …
    write(std::string(rank) + "/router.weight.npy", w);
    auto bias = read(std::string(rank) + "/router.expert_bias.npy");
    bias.reals[1] = bias.reals[0];  // … bias included
    write(std::string(rank) + "/router.expert_bias.npy", bias);
  }
  const Comparison c = compare_dump(read_dump(dir_));
  EXPECT_GT(c.replay.replayed, 0);
  EXPECT_EQ(c.replay.largest_margin, 0.0);
  // Replayed rows match: the map differs only in the rows beyond rounding (the change made other rows rank otherwise).
  EXPECT_EQ(tensor_named(c, "router.routing_map").rows_differing,
            static_cast<std::int64_t>(c.replay.beyond_rounding.size()));
}

TEST_F(DumpCopy, ClaimedSemanticsMatter) {
  // The layer has no shared-expert clamp and no padding: every profile computes the same numbers, so a wrong
  // semantics claim is not detectable here — but an unknown one is refused.
  auto j = meta();
  j["semantics"] = "megatron-core-0.20";
  write_meta(j);
  expect_refused("unknown semantics profile 'megatron-core-0.20'");
}

TEST_F(DumpCopy, MissingTensorIsListedNotFailed) {
  for (const char* rank : {"rank0", "rank1"}) fs::remove(dir_ / rank / "router.probs.npy");
  const Comparison c = compare_dump(read_dump(dir_));
  EXPECT_TRUE(c.pass());
  ASSERT_EQ(c.absent.size(), 1u);
  EXPECT_EQ(c.absent[0], "router.probs (rank 0, 1)");
}

TEST_F(DumpCopy, RefusesAnUnknownFormat) {
  auto j = meta();
  j["format"] = "moe-dump/2";
  write_meta(j);
  expect_refused("format \"moe-dump/2\" is not moe-dump/1");
}

TEST_F(DumpCopy, RefusesUnknownKeys) {
  auto j = meta();
  j["fusion"] = true;
  write_meta(j);
  expect_refused("unknown key 'fusion'");
}

TEST_F(DumpCopy, RefusesAMissingRank) {
  fs::remove_all(dir_ / "rank1");
  expect_refused("rank1: missing (the layout has 2 ranks)");
}

TEST_F(DumpCopy, RefusesAWrongShape) {
  write("rank0/router.weight.npy", formats::NpyArray::of_reals({3, 4}, std::vector<double>(12)));
  expect_refused("shape [3, 4], expected [4, 4]");
}

TEST_F(DumpCopy, RefusesATruncatedFile) {
  fs::resize_file(dir_ / "rank0" / "output.npy", 100);
  expect_refused("rank0/output.npy");
}

TEST_F(DumpCopy, RefusesParametersThatDifferBetweenRanks) {
  auto w = read("rank1/router.weight.npy");
  w.reals[0] = 0.5;
  write("rank1/router.weight.npy", w);
  expect_refused("router.weight differs from rank 0's");
}

TEST_F(DumpCopy, RefusesABadConfigAndLayout) {
  auto j = meta();
  j["config"]["topk"] = 9;
  write_meta(j);
  expect_refused("config: invalid MoE config: topk must be in [1, num_experts]");
  j = meta();
  j["config"]["topk"] = 2;
  j["layout"]["ep"] = 3;
  write_meta(j);
  expect_refused("layout:");
}

// A real GPU run: megatron-core 0.19.2's layer on an H200 (torch 2.11, bf16 parameters and activations, NCCL,
// cuBLAS; megatron_bridge/gpu_capture.py), its SwiGLU clamped at 0.5, which bf16 pre-activations land on exactly.
// torch 2.11's clamp passes the gradient there: the dump fails as megatron-core-0.19 alone, the failure is named
// clamp-limit-passes-gradient, and with it the dump passes under the bf16 error model. (The same layer on CPU under
// torch 2.15 passes without it and fails with it.)
TEST(CompareMegatron, BfloatDumpOfAGpuRunNamesTorchsClampGradient) {
  const fs::path dir = fs::path(COMPARE_DATA_DIR) / "megatron_h200_bf16_clamp";
  const Dump claimed = read_dump(dir);
  EXPECT_EQ(claimed.precision, Precision::bfloat16);
  const Comparison as_claimed = compare_dump(claimed);
  EXPECT_FALSE(as_claimed.pass());
  EXPECT_EQ(explaining_deviations(claimed), std::vector<std::string>{"+clamp-limit-passes-gradient"});
  const Comparison with_torch = compare_dump(read_dump(dir, {"megatron-core-0.19,+clamp-limit-passes-gradient", {}}));
  EXPECT_TRUE(with_torch.pass());
  EXPECT_EQ(with_torch.tensors.size(), as_claimed.tensors.size());
  EXPECT_GE(with_torch.tensors.size(), 20u);  // the output, dx, the router's probs and map, aux, every gradient
}

}  // namespace
}  // namespace moe::compare
