// Determinism: `moe-oracle check --json` run twice with the same seed prints the same bytes, except each run's
// wall-clock "seconds". Every rank's reduction order, the dispatchers' row order, the oracle's sums and the
// OpenMP-parallel kernels must not depend on thread timing; a regression there shows up as a last-bit difference in
// some max_abs, which this comparison sees (it compares the text, not the parsed numbers).
//
// It can fail: the same comparison between two different seeds must find a difference (the control below), so a
// comparison that strips too much, or output that ignores the seed, fails the test too.
#include "cli/tests/cli_run.hpp"

#include <regex>
#include <string>

namespace moe::test {
namespace {

// The --json output with every "seconds" value replaced by 0: the only field that may differ between two runs.
std::string without_seconds(const std::string& text) {
  static const std::regex seconds(R"re(("seconds":\s*)-?[0-9][0-9.eE+-]*)re");
  return std::regex_replace(text, seconds, "${1}0");
}

std::string check_json(const std::string& args) {
  const Result r = run("check --json " + args);
  EXPECT_EQ(r.status, 0) << args << "\n" << r.output;
  EXPECT_NE(r.output.find("\"seconds\""), std::string::npos) << "no run in the output of check " << args;
  return r.output;
}

void expect_deterministic(const std::string& args) {
  const std::string first = without_seconds(check_json(args));
  const std::string second = without_seconds(check_json(args));
  EXPECT_EQ(first, second) << "check " << args << " printed different JSON in two runs with the same seed";
}

TEST(Determinism, CheckOnOneLayoutEveryDispatcher) { expect_deterministic("--world 4 --ep 2 --seed 5"); }

TEST(Determinism, CheckFilteredFromTheDefaultSet) {
  // Capacity dropping (a sort with ties) under TP 2 · CP 2, and a Megatron profile on 8 ranks.
  expect_deterministic("--filter \"tiny-capacity avg b2 [intended] w8 tp2 cp2\" "
                       "--filter \"tiny-v4 sum b2 [megatron-core-0.19] w8\"");
}

TEST(Determinism, CheckTrainingStepsWithTheDistributedOptimizer) {
  expect_deterministic("--world 8 --tp 2 --ep 4 --etp 2 --steps 2 --distributed-optimizer --seed 5");
}

// Runs side by side (check's default --jobs: one per hardware thread, each a world of fiber ranks) print what one
// after another prints, in the same order. The filter picks both resumed rows of the default set, each resumed
// three times: side by side, each needs its own checkpoint folder.
TEST(Determinism, RunsSideBySideEqualRunsOneAfterAnother) {
  const std::string one = without_seconds(check_json("--jobs 1 --filter resume --filter \"tiny-top1 sum b2\""));
  const std::string four = without_seconds(check_json("--jobs 4 --filter resume --filter \"tiny-top1 sum b2\""));
  EXPECT_EQ(one, four) << "check --jobs 4 printed other JSON than --jobs 1";
  EXPECT_EQ(run("check --jobs 2 --backend mpi").status, 2);  // under mpirun one layout runs at a time
  EXPECT_EQ(run("check --jobs 0").status, 2);
}

TEST(Determinism, AnotherSeedPrintsOtherNumbers) {
  const std::string seed5 = without_seconds(check_json("--world 4 --ep 2 --seed 5"));
  const std::string seed6 = without_seconds(check_json("--world 4 --ep 2 --seed 6"));
  EXPECT_NE(seed5, seed6) << "the comparison would not see a difference in the numbers";
}

}  // namespace
}  // namespace moe::test
