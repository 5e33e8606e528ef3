// What compare must refuse (exit 2 in the CLI) rather than judge, and what its verdict must say it compared: each
// test is a finding of a hostile run against an earlier build, where the dump below passed, crashed, hung or was
// judged a mismatch. The base is the committed float32 megatron-core dump (world 2, EP 2, with a backward).
#include "compare/tests/dump_copy.hpp"

#include <sys/stat.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <limits>

namespace moe::compare {
namespace {

using test::kRanks;
namespace fs = std::filesystem;

class Refusal : public test::DumpCopy {};

// Was: the whole backward skipped and gradients of 123 passing, exit 0.
TEST_F(Refusal, OutputGradOnSomeRanksOnly) {
  fs::remove(dir_ / "rank1" / "output.grad.npy");
  auto g = read("rank0/router.weight.grad.npy");
  for (double& v : g.reals) v = 123;
  write("rank0/router.weight.grad.npy", g);
  expect_refused("output.grad is on rank 0 but not on rank 1");
}

// Expert files renamed to TEGroupedMLP's form (experts.linear_fc1.weight0, …) on `rank`; `grads_too` renames the
// gradients as well.
void name_experts_grouped(const fs::path& rank, bool grads_too) {
  for (int i = 0; i < 2; ++i)
    for (const char* which : {"linear_fc1", "linear_fc2"})
      for (const char* suffix : {"", ".grad"}) {
        if (!grads_too && *suffix) continue;
        const std::string from = "experts.local_experts." + std::to_string(i) + "." + which + ".weight" + suffix;
        const std::string to = std::string("experts.") + which + ".weight" + std::to_string(i) + suffix;
        fs::rename(rank / (from + ".npy"), rank / (to + ".npy"));
      }
}

// Was: rank 0 named its experts TEGroupedMLP's way and rank 1 SequentialMLP's; each name was "on every rank that
// lists it", rank 0's gradients (wrong × 9) were never compared, and the verdict was PASS.
TEST_F(Refusal, ExpertsNamedOneWayHereAndAnotherThere) {
  auto g = read("rank0/experts.local_experts.0.linear_fc1.weight.grad.npy");
  for (double& v : g.reals) v *= 9;
  write("rank0/experts.local_experts.0.linear_fc1.weight.grad.npy", g);
  name_experts_grouped(dir_ / "rank0", true);
  expect_refused("rank1: names its experts SequentialMLP's way and rank 0 the other");
}

TEST_F(Refusal, AnExpertsWeightNamedOneWayAndItsGradientTheOther) {
  for (const char* rank : kRanks) name_experts_grouped(dir_ / rank, false);
  expect_refused("names an expert SequentialMLP's way and another file of rank 0 TEGroupedMLP's");
}

TEST_F(Refusal, TheGroupedNamesOnEveryRankAreCompared) {
  for (const char* rank : kRanks) name_experts_grouped(dir_ / rank, true);
  const Comparison c = compare_dump(read_dump(dir_));
  EXPECT_TRUE(c.pass());
  bool compared = false;
  for (const auto& t : c.tensors) compared = compared || t.tensor == "experts.linear_fc1.weight0.grad";
  EXPECT_TRUE(compared);
}

TEST_F(Refusal, GradientsWithoutOutputGrad) {
  remove_everywhere("output.grad");
  expect_refused("a gradient without output.grad");
}

TEST_F(Refusal, ABackwardWithoutDx) {
  remove_everywhere("hidden_states.grad");
  expect_refused("output.grad without hidden_states.grad");
}

TEST_F(Refusal, AnyTensorOnSomeRanksOnly) {
  fs::remove(dir_ / "rank0" / "router.probs.npy");
  expect_refused("router.probs is on rank 1 but not on rank 0");
}

// Was: "PASS: 0 tensors compared", exit 0.
TEST_F(Refusal, ADumpOfInputsOnly) {
  remove_gradients();
  for (const char* name : {"output", "output.grad", "router.probs", "router.routing_map", "aux_loss",
                           "router.local_tokens_per_expert"})
    remove_everywhere(name);
  expect_refused("no output.npy");
}

TEST_F(Refusal, AForwardOnlyDumpPassesAndSaysSo) {
  remove_gradients();
  remove_everywhere("output.grad");
  const Comparison c = compare_dump(read_dump(dir_));
  EXPECT_TRUE(c.pass());
  EXPECT_FALSE(c.backward);
  EXPECT_EQ(c.backward_tensors(), 0);
  EXPECT_EQ(c.forward_tensors(), 5);  // output, probs, routing map, aux loss, expert-bias counts
}

// Was: NaN in an expert's weights passed when no token reached it, and elsewhere was judged a mismatch ("FAIL")
// or, in router.weight, "differs from rank 0's".
TEST_F(Refusal, NonFiniteInputsAndParameters) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const std::pair<const char*, double> cases[] = {
      {"rank1/experts.local_experts.1.linear_fc2.weight.npy", nan}, {"rank0/hidden_states.npy", nan},
      {"rank1/output.grad.npy", inf}, {"rank0/router.expert_bias.npy", nan},
      {"rank0/shared_experts.linear_fc1.weight.npy", -inf}};
  for (const auto& [file, value] : cases) {
    SCOPED_TRACE(file);
    const auto before = read(file);
    set_element(file, 0, value);
    expect_refused(std::string(file) + ": element 0 is " + (std::isnan(value) ? "NaN" : "infinite"));
    write(file, before);
  }
  for (const char* r : kRanks) set_element(std::string(r) + "/router.weight.npy", 3, nan);
  expect_refused("router.weight.npy: element 3 is NaN");
}

// Was: uninitialised memory read (ffn_hidden % etp, shared width % tp) and SIGFPE (ep > num_experts).
TEST_F(Refusal, ShardingThatDoesNotDivide) {
  auto j = meta();
  j["layout"] = {{"world", 8}, {"ep", 8}};
  write_meta(j);
  expect_refused("num_experts (4) must be divisible by ep (8)");
  j["layout"] = {{"world", 2}, {"ep", 1}, {"etp", 2}};
  j["config"]["ffn_hidden"] = 3;
  write_meta(j);
  expect_refused("ffn_hidden (3) must be divisible by etp (2)");
  j["layout"] = {{"world", 2}, {"tp", 2}, {"ep", 1}};
  j["config"]["ffn_hidden"] = 2;
  j["config"]["shared_expert_ffn_hidden"] = 3;
  write_meta(j);
  expect_refused("shared_expert_ffn_hidden (3) must be divisible by tp (2)");
}

// Was: a float32 dump 1% off passed by declaring "precision": "bfloat16".
TEST_F(Refusal, ADumpCannotLoosenItsOwnTolerance) {
  set_element("rank0/output.npy", 2, read("rank0/output.npy").reals[2] * 1.01);
  auto j = meta();
  j["precision"] = "bfloat16";
  write_meta(j);
  expect_refused("precision \"bfloat16\" is looser than the dump's float32 arrays");
  // The user may state it; then the tolerance is bfloat16's, and the verdict says where it came from.
  const Dump stated = read_dump(dir_, {"", Precision::bfloat16});
  EXPECT_EQ(stated.precision_from, "--precision");
  EXPECT_TRUE(compare_dump(stated).pass());
  // Without the claim the arrays' precision holds, and the 1% fails.
  j.erase("precision");
  write_meta(j);
  const Dump own = read_dump(dir_);
  EXPECT_EQ(own.precision, Precision::float32);
  EXPECT_FALSE(compare_dump(own).pass());
  // A tighter claim is the dump's to make.
  j["precision"] = "float64";
  write_meta(j);
  EXPECT_EQ(read_dump(dir_).precision, Precision::float64);
}

TEST_F(Refusal, ArraysOfAnotherDtypeThanDeclared) {
  auto j = meta();
  j["dtype"] = "float64";
  j.erase("precision");
  write_meta(j);
  expect_refused("holds <f4 values, narrower than dump.json's dtype float64");
}

// Was: a capture of a bf16 Megatron layer refused, its float32 router probabilities and float64 aux loss "of another
// dtype". A wider file keeps every value of the declared one: taken, and judged at the declared dtype's tolerance.
TEST_F(Refusal, WiderArraysThanDeclaredAreTaken) {
  auto aux = read("rank0/aux_loss.npy");
  ASSERT_EQ(aux.dtype, formats::NpyDtype::f4);
  aux.dtype = formats::NpyDtype::f8;  // the same values, as float64
  formats::write_npy(dir_ / "rank0/aux_loss.npy", aux);
  const Comparison wider = compare_dump(read_dump(dir_));
  EXPECT_TRUE(wider.pass());
  // Still judged at float32's tolerance: a float32-sized error in the float64 file fails.
  aux.reals[0] *= 1 + 1e-3;
  formats::write_npy(dir_ / "rank0/aux_loss.npy", aux);
  EXPECT_FALSE(compare_dump(read_dump(dir_)).pass());
}

TEST_F(Refusal, MalformedHeaderKeys) {
  auto j = meta();
  j["shape"]["sequence"] = 4;
  write_meta(j);
  expect_refused("unknown key 'shape.sequence'");
  j = meta();
  j["shape"].erase("sequence");
  j["dtype"] = 5;
  write_meta(j);
  expect_refused("'dtype' must be a string, not number");
  j["dtype"] = "float32";
  j["replay_capacity"] = "yes";
  write_meta(j);
  expect_refused("'replay_capacity' must be true or false");
}

TEST_F(Refusal, DuplicateAndDeeplyNestedJson) {
  std::string text;
  {
    std::ifstream in(dir_ / "dump.json");
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  std::ofstream(dir_ / "dump.json") << "{\"dtype\": \"float64\", " << text.substr(text.find('{') + 1);
  expect_refused("key \"dtype\" appears twice");
  std::ofstream(dir_ / "dump.json") << std::string(200000, '[') << std::string(200000, ']');
  expect_refused("nested deeper than 64");
}

TEST_F(Refusal, AFifoAsDumpJsonIsNotOpened) {
  fs::remove(dir_ / "dump.json");
  ASSERT_EQ(::mkfifo((dir_ / "dump.json").c_str(), 0600), 0);
  auto done = std::async(std::launch::async, [&] { expect_refused("is not a regular file (it is a FIFO)"); });
  ASSERT_EQ(done.wait_for(std::chrono::seconds(10)), std::future_status::ready) << "blocked on a FIFO";
  done.get();
}

TEST_F(Refusal, AFloatPaddingMask) {
  for (const char* r : kRanks)
    write(std::string(r) + "/padding_mask.npy", formats::NpyArray::of_reals({4, 1}, {0, 0, 0, 0}));
  expect_refused("padding_mask.npy: must hold booleans");
}

TEST_F(Refusal, ARankFolderBeyondTheWorld) {
  fs::create_directories(dir_ / "rank2");
  expect_refused("rank2: is not a rank of the layout's world of 2");
  fs::remove(dir_ / "rank2");
  fs::create_directories(dir_ / "rank01");
  expect_refused("rank01: is not a rank");
}

TEST_F(Refusal, ASymlinkLoopIsNamed) {
  fs::create_symlink("loop.npy", dir_ / "rank0" / "loop.npy");
  expect_refused("loop.npy");
}

TEST_F(Refusal, AParameterTheConfigDoesNotHave) {
  auto j = meta();
  j["config"]["expert_bias"] = false;
  j["config"].erase("bias_update_rate");
  write_meta(j);
  expect_refused("router.expert_bias.npy: a parameter this config does not have");
}

// Was: the dump's shape was allocated (S·B rows) before any file was looked at: bad_alloc after taking all memory.
TEST_F(Refusal, SizesAreCheckedAgainstTheFilesBeforeAnythingIsAllocated) {
  auto j = meta();
  j["shape"] = {{"seq", 1 << 24}, {"batch", 1 << 24}};
  write_meta(j);
  expect_refused("hidden_states.npy: shape [4, 1, 4], expected [16777216, 16777216, 4]");
}

TEST_F(Refusal, MoreMemoryThanTheBudget) {
  ::setenv("MOE_ORACLE_MEMORY_BUDGET", "4096", 1);
  const std::string what = refusal();
  ::unsetenv("MOE_ORACLE_MEMORY_BUDGET");
  EXPECT_NE(what.find("the oracle for this dump: needs about"), std::string::npos) << what;
  EXPECT_NE(what.find("more than the memory budget"), std::string::npos) << what;
}

// Every data-parallel copy of a shard is compared with the first: a replica trained from other weights is an
// inconsistent dump, whatever the first copy says.
TEST_F(Refusal, AShardCopyThatDiffers) {
  set_element("rank1/shared_experts.linear_fc1.weight.npy", 0, 0.5);
  expect_refused("shared_experts.linear_fc1.weight differs from rank 0's copy");
}

// A hash layer needs its input ids and table, as integers (the layer itself is judged in check's round trip).
TEST_F(Refusal, AHashLayerWithoutItsIdsOrTable) {
  auto j = meta();
  j["config"]["hash_routing"] = true;
  j["config"]["expert_bias"] = false;
  j["config"].erase("bias_update_rate");
  write_meta(j);
  for (const char* r : kRanks) fs::remove(dir_ / r / "router.expert_bias.npy");
  expect_refused("no input_ids.npy");
  for (const char* r : kRanks) write(std::string(r) + "/input_ids.npy", formats::NpyArray::of_reals({4, 1}, {0, 1, 2, 3}));
  expect_refused("input_ids.npy: must hold integers");
  for (const char* r : kRanks) {
    formats::write_npy(dir_ / r / "input_ids.npy", formats::NpyArray::of_integers({4, 1}, {0, 1, 2, 9}));
    formats::write_npy(dir_ / r / "router.tid2eid.npy", formats::NpyArray::of_integers({4, 2}, {0, 1, 1, 2, 2, 3, 3, 0}));
  }
  expect_refused("input id 9 is outside the tid2eid table [0, 4)");
}

// Was: listed as "unknown, not compared" although it is read, and its gradient compared.
TEST_F(Refusal, TheSharedExpertGateIsKnown) {
  auto j = meta();
  j["config"]["shared_expert_gate"] = true;
  write_meta(j);
  for (const char* r : kRanks) {
    write(std::string(r) + "/shared_experts.gate_weight.npy", formats::NpyArray::of_reals({1, 4}, {0, 0, 0, 0}));
    write(std::string(r) + "/shared_experts.gate_weight.grad.npy", formats::NpyArray::of_reals({1, 4}, {0, 0, 0, 0}));
  }
  const Comparison c = compare_dump(read_dump(dir_));
  EXPECT_TRUE(c.ignored.empty()) << c.ignored.front();
  bool gate_grad = false;
  for (const auto& t : c.tensors) gate_grad = gate_grad || t.tensor == "shared_experts.gate_weight.grad";
  EXPECT_TRUE(gate_grad);
}

// aux_pool (statistics of rows outside the dump pooled into a global_aux loss) must describe an aux map: one
// count per expert, whole and non-negative, topk per valid row, and only where the loss is global_aux. Each would
// otherwise move the router's expected gradient by a claim no file backs.
TEST_F(Refusal, AnAuxPoolThatIsNotAnAuxMapsStatistic) {
  auto j = meta();
  j["aux_pool"] = {{"counts", {3, 1, 0, 0}}, {"tokens", 2}};
  write_meta(j);
  expect_refused("aux_pool pools statistics into a global_aux loss; config.aux_loss_type is aux");
  j["config"]["aux_loss_type"] = "global_aux";
  j["aux_pool"] = {{"counts", {3, 1, 0}}, {"tokens", 2}};
  write_meta(j);
  expect_refused("aux_pool.counts must be an array of num_experts (4) counts");
  j["aux_pool"] = {{"counts", {3, 1, 0, 1}}, {"tokens", 2}};
  write_meta(j);
  expect_refused("aux_pool.counts sum to 5, not topk × tokens = 2 × 2");
  j["aux_pool"] = {{"counts", {3, 2, -1, 0}}, {"tokens", 2}};
  write_meta(j);
  expect_refused("aux_pool.counts must be non-negative integers, not -1");
  j["aux_pool"] = {{"counts", {3, 1, 0, 0}}, {"tokens", 0}};
  write_meta(j);
  expect_refused("aux_pool.tokens must be a positive integer");
  j["aux_pool"] = {{"counts", {3, 1, 0, 0}}, {"tokens", 2}, {"layers", 2}};
  write_meta(j);
  expect_refused("unknown key 'aux_pool.layers'");
}

}  // namespace
}  // namespace moe::compare
