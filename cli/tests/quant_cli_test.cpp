// `moe-oracle quant`: the census says the figures derived by hand in reference/tests/fp4_to_fp8_test.cpp, and a
// weight matrix is judged tile by tile: one whose MXFP4 sub-block exponents spread by 20 inside a tile is refused
// as lossy (exit 1), the same tile without the spread passes; an empty matrix is refused (exit 2), and so is one
// whose header declares more than the memory budget (exit 2, before its data is read).
#include "cli/tests/cli_run.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

namespace moe::test {
namespace {

namespace fs = std::filesystem;

// A float64 .npy v1.0 file of shape [rows, cols], C order, written by hand (the test does not link the reader).
void write_f8(const fs::path& path, int rows, int cols, const std::vector<double>& values) {
  std::string header = "{'descr': '<f8', 'fortran_order': False, 'shape': (" + std::to_string(rows) + ", " +
                       std::to_string(cols) + "), }";
  header.append(64 - (10 + header.size() + 1) % 64, ' ');
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  out.write("\x93NUMPY\x01\x00", 8);
  const std::uint16_t length = static_cast<std::uint16_t>(header.size());
  out.write(reinterpret_cast<const char*>(&length), 2);
  out << header;
  out.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(values.size() * 8));
}

TEST(QuantCli, CensusSaysTheHandDerivedFigures) {
  const auto j = run_json("quant");
  EXPECT_EQ(j["mxfp4_largest_lossless_spread"], 14);
  EXPECT_EQ(j["nvfp4_exact_pairs"]["exact"], 657);
  EXPECT_EQ(j["nvfp4_exact_pairs"]["total"], 882);
  EXPECT_EQ(j["mxfp4_amax_scale_exact_pairs"]["exact"], 44);
  EXPECT_EQ(j["mxfp4_amax_scale_exact_pairs"]["total"], 105);
  for (const auto& c : j["mxfp4_offsets"]) {
    const int d = c["offset"];
    EXPECT_EQ(c["exact"], d >= -8 && d <= 6 ? 16 : d == -9 || d == 7 ? 12 : 8) << "offset " << d;
  }
}

TEST(QuantCli, WeightsWithATileSpreadBeyondFp8AreLossy) {
  const fs::path dir = fs::temp_directory_path() / ("moe-quant-cli-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  // One tile of 128 × 64: every element 1.0, then the first sub-block of row 0 at 2^10 and the second at 2^-10
  // (e8m0 exponents 8 and -12: a spread of 20 no power-of-two FP8 scale covers).
  std::vector<double> even(128 * 64, 1.0);
  write_f8(dir / "even.npy", 128, 64, even);
  std::vector<double> spread = even;
  for (int c = 0; c < 32; ++c) spread[static_cast<std::size_t>(c)] = 1024.0;
  for (int c = 32; c < 64; ++c) spread[static_cast<std::size_t>(c)] = 1.0 / 1024;
  write_f8(dir / "spread.npy", 128, 64, spread);

  const auto ok = run("quant --weights " + (dir / "even.npy").string());
  EXPECT_EQ(ok.status, 0) << ok.output;
  EXPECT_NE(ok.output.find("1 of 1 tiles exact"), std::string::npos) << ok.output;
  const auto lossy = run("quant --weights " + (dir / "spread.npy").string());
  EXPECT_EQ(lossy.status, 1) << lossy.output;
  EXPECT_NE(lossy.output.find("first lossy tile at row 0, column 0"), std::string::npos) << lossy.output;
  const auto missing = run("quant --weights " + (dir / "missing.npy").string());
  EXPECT_EQ(missing.status, 2) << missing.output;
  // No element to judge: refused (it crashed on the empty matrix's maximum).
  write_f8(dir / "empty.npy", 0, 64, {});
  const auto empty = run("quant --weights " + (dir / "empty.npy").string());
  EXPECT_EQ(empty.status, 2) << empty.output;
  EXPECT_NE(empty.output.find("at least one element"), std::string::npos) << empty.output;
  // Near the double range the error is still a number (a plain norm overflowed to inf / inf).
  write_f8(dir / "huge.npy", 1, 2, {1e300, 1.0});
  const auto huge = run_json("quant --weights " + (dir / "huge.npy").string());
  EXPECT_TRUE(huge["mxfp4_relative_error"].is_number()) << huge.dump();
  fs::remove_all(dir);
}

// Two elements near the largest double: the matrix's norm itself is past it. Before: "relative (Frobenius) -nan"
// (inf / inf) and null in the JSON. MXFP4 holds at most 6·2^127, so nearly all of each element is lost: ~1.
TEST(QuantCli, TheRelativeErrorIsANumberWhenTheNormPassesTheDoubleRange) {
  const fs::path dir = fs::temp_directory_path() / ("moe-quant-cli-range-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  write_f8(dir / "edge.npy", 1, 2, {1.5e308, -1.5e308});
  const auto text = run("quant --weights " + (dir / "edge.npy").string());
  EXPECT_EQ(text.output.find("nan"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("relative (Frobenius) 1\n"), std::string::npos) << text.output;
  const auto j = run_json("quant --weights " + (dir / "edge.npy").string());
  ASSERT_TRUE(j["mxfp4_relative_error"].is_number()) << j.dump();
  EXPECT_NEAR(j["mxfp4_relative_error"].get<double>(), 1.0, 1e-12);
  fs::remove_all(dir);
}

// Issue 55: `quant --weights` ignored MOE_ORACLE_MEMORY_BUDGET and read the whole file before looking at its
// shape. The header is read first and the matrix's memory held to the one budget: exit 2, one line naming the
// estimate and the budget, before a byte of data is read (the 128 GiB file below is sparse: nothing is on disk).
TEST(QuantCli, WeightsBeyondTheMemoryBudgetAreRefusedFromTheHeader) {
  const fs::path dir = fs::temp_directory_path() / ("moe-quant-cli-budget-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const auto expect_refused = [&](const fs::path& file, const std::string& budget, const std::string& estimate) {
    ::setenv("MOE_ORACLE_MEMORY_BUDGET", budget.c_str(), 1);
    const auto r = run("quant --weights " + file.string(), "timeout 60");
    ::unsetenv("MOE_ORACLE_MEMORY_BUDGET");
    EXPECT_EQ(r.status, 2) << r.output;
    for (const std::string& fragment : {file.string() + ": quantising a " + estimate,
                                        "more than the memory budget of " + budget + " bytes",
                                        std::string("MOE_ORACLE_MEMORY_BUDGET")})
      EXPECT_NE(r.output.find(fragment), std::string::npos) << fragment << "\n" << r.output;
    EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << "one line: " << r.output;
  };
  // 256 × 256 float64 (0.5 MB of data, ~2.6 MB to judge): under a budget of 1 MB it was judged anyway.
  write_f8(dir / "small.npy", 256, 256, std::vector<double>(256 * 256, 1.0));
  expect_refused(dir / "small.npy", "1000000", "[256, 256] matrix: needs about 2621440 bytes");
  // A header declaring [2^17, 2^17] float64, with the 128 GiB its shape needs (a sparse file).
  write_f8(dir / "huge.npy", 1 << 17, 1 << 17, {});
  fs::resize_file(dir / "huge.npy", fs::file_size(dir / "huge.npy") + (std::uintmax_t(1) << 37));
  expect_refused(dir / "huge.npy", "1000000000", "[131072, 131072] matrix: needs about ");
  // The small matrix fits a budget of 10 MB.
  ::setenv("MOE_ORACLE_MEMORY_BUDGET", "10000000", 1);
  const auto fits = run("quant --weights " + (dir / "small.npy").string());
  ::unsetenv("MOE_ORACLE_MEMORY_BUDGET");
  EXPECT_EQ(fits.status, 0) << fits.output;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace moe::test
