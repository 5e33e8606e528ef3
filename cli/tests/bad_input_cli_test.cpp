// Bad numbers on the command line are refused with one line and exit status 2, before any work starts: the inputs
// that crashed, hung or were silently accepted (layout products that overflowed, zero repetitions, byte counts past
// 2^63, empty seeds, NaN and negative tolerances, unbounded step counts, configs with absurd sizes).
#include "cli/tests/cli_run.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

namespace moe::test {
namespace {

// Exit status 2 (a usage error, not a crash: a signal gives -1 here), with `fragment` in what was printed.
void expect_refused(const std::string& args, const std::string& fragment) {
  const Result r = run(args);
  EXPECT_EQ(r.status, 2) << args << "\n" << r.output;
  EXPECT_NE(r.output.find(fragment), std::string::npos) << args << "\nexpected: " << fragment << "\n" << r.output;
}

TEST(BadInput, LayoutProductsThatOverflowAreRefused) {
  expect_refused("groups --world 8 --tp 65536 --cp 65536", "must each be <= world");
  expect_refused("groups --world 8 --tp 46341 --cp 46341", "must each be <= world");
  expect_refused("volume --world 8 --ep 65536 --etp 65536", "must each be <= world");
  expect_refused("volume --world 8 --ep 2 --gtp 2 --hot-expert-replicas 2", "not accounted with GTP");
  expect_refused("volume --world 8 --ep 2 --etp 2 --hot-expert-replicas 2", "needs ETP 1");
  expect_refused("check --world 4 --ep 2 --etp 2 --hot-expert-replicas 2", "does not run with ETP > 1");
  expect_refused("check --world 4 --ep 2 --expert-waves 2 --dispatcher flex", "runs with the AlltoAll dispatcher");
  expect_refused("check --world 4 --ep 4 --expert-waves 5", "leaves 4 local experts per rank");
  expect_refused("check --world 4 --ep 2 --expert-waves 2 --hot-expert-replicas 2", "does not run with replicated");
  expect_refused("check --world 8 --tp 4 --cp 4 --pp 268435456", "must each be <= world");
  expect_refused("check --steps 2 --resume-as world=4,ep=65536,etp=65536 --world 2", "must each be <= world");
  expect_refused("groups --world 1073741824", "world");
}

TEST(BadInput, CountsOutsideTheirRangeAreRefused) {
  expect_refused("bench --repetitions 0 --tokens 8 --hidden 8", "--repetitions");
  expect_refused("check --steps 2147483647", "--steps");
  expect_refused("volume --world 8 --seq 2147483647 --micro-batch 2147483647", "2^62");
  expect_refused("bench --world 4096 --tokens 8 --hidden 8 --experts 4096", "mpirun");
  expect_refused("bench --tokens 2000000000 --hidden 4096", "available");
}

// The options this release added, in combinations that cannot run: each refused before any work, naming why.
TEST(BadInput, ClippingInterleavingAndFp8CombinationsAreRefused) {
  expect_refused("check --clip-grad 0.5", "--clip-grad needs --steps");
  expect_refused("check --steps 1 --clip-grad 0", "--clip-grad");
  expect_refused("check --vpp 2", "--vpp needs --world");
  expect_refused("check --world 4 --vpp 2", "needs pp > 1");
  expect_refused("check --world 8 --pp 4 --vpp 2 --ep 2", "pp·vpp (8 stages)");
  expect_refused("check --world 8 --pp 4 --vpp 2 --ep 2 --layers 8 --global-batch 12", "multiple of pp");
  expect_refused("check --dtype float --quant fp8-dispatch", "double only");
  // In float the default set drops its FP8 rows as it drops its multi-step rows.
  expect_refused("check --dtype float --filter fp8", "matches no run");
  expect_refused("check --steps 2 --optimizer lion", "(adam, muon, sgd)");
  expect_refused("check --steps 2 --optimizer muon --distributed-optimizer", "muon runs with DDP");
  // Float drops the multi-step rows, the Muon row with them.
  expect_refused("check --dtype float --filter muon", "matches no run");
}

// Attention's options: an exchange Megatron has but this build does not, an exchange for a model without attention,
// heads that TP or the groups cannot split, and float (the CPU parallel system runs attention in double).
TEST(BadInput, AttentionOptionsAreRefused) {
  expect_refused("check --preset tiny-attention --cp-comm-type a2a", "not built");
  expect_refused("check --cp-comm-type p2p --preset tiny-v4", "no attention");
  expect_refused("check --num-query-groups 2", "--num-attention-heads");
  expect_refused("check --preset tiny-attention --num-query-groups 3", "multiple of groups");
  expect_refused("check --preset tiny-attention --num-attention-heads 4 --num-query-groups 1 --world 2 --tp 2",
                 "tp (2) must divide");
  expect_refused("check --preset tiny-attention --dtype float", "attention in double only");
  expect_refused("check --dtype float --filter attention", "matches no run");
}

// A dtype that does not exist. (bf16 storage on the device kernels runs since they round at the model's storage
// points: tools/gpu-check runs `check --kernels cuda --dtype bf16`.)
TEST(BadInput, UnknownDtypeIsRefused) {
  expect_refused("check --dtype half", "(double, float, bf16)");
}

TEST(BadInput, EmptyNanAndNegativeValuesAreRefused) {
  expect_refused("check --seed ''", "empty");
  expect_refused("layer --seed ''", "empty");
  expect_refused("check --atol -5", "--atol");
  expect_refused("check --rtol nan", "finite");
  expect_refused("check --rtol inf", "finite");
  expect_refused("check --rtol 1e400", "range");
  expect_refused("check --filter ''", "empty");
}

// Before: "--clip-grad: Value 0 not in range 0.000000 to 179769313486231570814527423731704356798…" (CLI11's
// PositiveNumber: a range over doubles, its bound in 309 digits, and 0 inside it).
TEST(BadInput, ZeroWhereAPositiveValueIsNeededSaysTheRuleInWords) {
  for (const std::string args : {"check --steps 1 --clip-grad 0", "check --hot-expert-replicas 0",
                                 "check --expert-waves 0"}) {
    const std::string option = args.substr(args.rfind(" --") + 1, args.rfind(' ') - args.rfind(" --") - 1);
    expect_refused(args, option + ": must be a ");
    EXPECT_EQ(run(args).output.find("not in range"), std::string::npos) << args;
  }
}

TEST(BadInput, ExplicitZeroToleranceIsUsedNotReplacedByTheDefault) {
  // --atol 0 --rtol 0 is a request, not "unset": float rounding then fails it.
  const Result r = run("check --dtype float --world 2 --ep 2 --dispatcher flex --atol 0 --rtol 0");
  EXPECT_EQ(r.status, 1) << r.output;
}

TEST(BadInput, AbsurdConfigSizesAreRefusedBeforeAllocating) {
  const auto dir = std::filesystem::temp_directory_path() / ("moe-bad-input-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir / name) << text;
    return (dir / name).string();
  };
  const std::string base = R"("hidden": 8, "ffn_hidden": 4, "topk": 2, "score_function": "softmax")";
  expect_refused("golden write --out " + (dir / "a").string() + " --config " +
                     write("experts.json", "{" + base + R"(, "num_experts": 1000000000})"),
                 "num_experts must be <= 2^16");
  expect_refused("golden write --out " + (dir / "b").string() + " --config " +
                     write("overflow.json", "{" + base + R"(, "num_experts": 4, "hidden": 1e400})"),
                 "overflow.json");
  expect_refused("golden write --out " + (dir / "c").string() + " --seq 100000 --batch 100000 --config " +
                     write("ok.json", "{" + base + R"(, "num_experts": 4})"),
                 "available");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace moe::test
