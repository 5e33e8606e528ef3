// The command line's readers and option parsing refuse what they cannot read, in one line naming the option or
// file, with exit status 2 (refused input, never 1, a mismatch), and never hang, crash or guess: seeds outside
// 0 … 2^64 − 1, counts of 0 (CLI11's message printed a 309-digit range), empty or surplus --padding items,
// a deviation named twice, a FIFO or a 200,000-deep file given as JSON, a symlink loop among case folders.
#include "cli/tests/cli_run.hpp"

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

namespace moe::test {
namespace {

namespace fs = std::filesystem;

// Exit status 2 and one line of error containing `fragment` (a signal or hang-then-kill gives -1 or another code).
void expect_refused(const std::string& args, const std::string& fragment) {
  const Result r = run(args);
  EXPECT_EQ(r.status, 2) << args << "\n" << r.output;
  EXPECT_NE(r.output.find(fragment), std::string::npos) << args << "\nexpected: " << fragment << "\n" << r.output;
  EXPECT_LE(std::count(r.output.begin(), r.output.end(), '\n'), 2) << args << "\n" << r.output;  // + the --help hint
}

fs::path scratch() {
  const fs::path dir = fs::temp_directory_path() / ("moe-readers-cli-" + std::to_string(getpid()));
  fs::create_directories(dir);
  return dir;
}

TEST(CliReaders, SeedsAreExactlyTheDecimalIntegersOfUint64) {
  // Each of these became 2^64 − 1 (CLI11 clamps), so three different requests ran the same seed.
  for (const char* seed : {"-1", "18446744073709551616", "1e23", "0x10", "+1", "1.0", "99999999999999999999999"}) {
    expect_refused(std::string("layer --seed ") + seed, "--seed: must be a whole number from 0 to "
                                                        "18446744073709551615 written in decimal");
    expect_refused(std::string("step --seed ") + seed, "--seed: must be a whole number");
    expect_refused(std::string("check --seed ") + seed, "--seed: must be a whole number");
  }
  const Result top = run("layer --seed 18446744073709551615");
  EXPECT_EQ(top.status, 0) << top.output;
  EXPECT_NE(top.output.find("seed 18446744073709551615"), std::string::npos) << top.output;
  EXPECT_EQ(run("layer --seed 0").status, 0);
}

TEST(CliReaders, CountsBelowOneAreRefusedInPlainWords) {
  for (const std::string& args : {std::string("layer --seq 0"), std::string("layer --seq -2"),
                                  std::string("volume --world 0"), std::string("bench --tokens 0")}) {
    const Result r = run(args);
    EXPECT_EQ(r.status, 2) << args << "\n" << r.output;
    EXPECT_NE(r.output.find("must be a whole number >= 1, got '"), std::string::npos) << args << "\n" << r.output;
    EXPECT_EQ(r.output.find("179769313486"), std::string::npos) << args << "\n" << r.output;  // DBL_MAX's digits
  }
  expect_refused("volume --world 0", "--world: must be a whole number >= 1, got '0'");
  expect_refused("layer --seq 1.5", "--seq: must be a whole number >= 1, got '1.5'");
  expect_refused("check --num-attention-heads -1", "--num-attention-heads: must be a whole number >= 0");
  expect_refused("check --rotary-base 0", "--rotary-base: must be a number > 0, got '0'");
}

TEST(CliReaders, PaddingItemsAreNeverDroppedOrTruncated) {
  // ",,," ran unpadded; nine items for a batch of eight lost the ninth.
  expect_refused("check --world 1 --padding ',,,'", "--padding: ',,,' has an empty item");
  expect_refused("check --world 1 --padding '3,,1'", "has an empty item");
  expect_refused("check --world 1 --padding '1,'", "has an empty item");
  expect_refused("check --world 1 --global-batch 8 --padding 1,2,3,4,5,6,7,8,1",
                 "--padding: 9 items for a batch of 8 sequences");
}

TEST(CliReaders, ADeviationNamedTwiceIsRefused) {
  expect_refused("layer --semantics intended,+z-loss-local-mean,-z-loss-local-mean",
                 "deviation 'z-loss-local-mean' is named twice");
  expect_refused("layer --semantics megatron-core-0.19,-ce-per-cp-rank,-ce-per-cp-rank", "named twice");
}

TEST(CliReaders, JsonFilesGoThroughTheSharedReader) {
  const fs::path dir = scratch();
  // A FIFO with no writer: the old reader blocked in open() forever.
  const fs::path fifo = dir / "config.fifo";
  fs::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_refused("golden write --out " + (dir / "a").string() + " --config " + fifo.string(),
                 fifo.string() + ": is not a regular file");
  expect_refused("layer --model " + fifo.string(), fifo.string() + ": is not a regular file");
  // 200,000 levels: the old reader parsed them and overflowed the stack printing the value in an error.
  const fs::path deep = dir / "deep.json";
  std::ofstream(deep) << "{\"hidden\": " << std::string(200000, '[') << std::string(200000, ']') << "}";
  expect_refused("golden write --out " + (dir / "b").string() + " --config " + deep.string(), "nested deeper than");
  const fs::path twice = dir / "twice.json";
  std::ofstream(twice) << R"({"hidden": 8, "hidden": 16, "ffn_hidden": 4, "topk": 2, "num_experts": 4})";
  expect_refused("golden write --out " + (dir / "c").string() + " --config " + twice.string(),
                 "\"hidden\" appears twice");
  fs::remove_all(dir);
}

TEST(CliReaders, ASymlinkLoopIsNamedInOneLine) {
  const fs::path dir = scratch() / "cases";
  fs::create_directories(dir);
  fs::create_directory_symlink(dir / "loop", dir / "loop");  // a link to itself
  const Result r = run("golden verify " + dir.string());
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("moe-oracle: error: " + (dir / "loop").string()), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("filesystem error"), std::string::npos) << r.output;
  fs::remove_all(dir.parent_path());
}

}  // namespace
}  // namespace moe::test
