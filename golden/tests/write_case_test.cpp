// write_case replaces a case folder as a whole (golden/case_files.hpp, storage/staged_directory.hpp): a previous
// case is replaced, never mixed with the new one; a folder holding anything else is refused in one line and left
// as it was. (What a kill at a random moment leaves is golden.kill_at_random's test.)
#include "golden/golden_case.hpp"
#include "reference/tests/expect_error.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace moe::golden {
namespace {

namespace fs = std::filesystem;

const fs::path kCases = GOLDEN_CASES_DIR;

struct Area {
  explicit Area(const std::string& tag) : root(fs::temp_directory_path() / ("moe_golden_write_test_" + tag)) {
    fs::remove_all(root);
    fs::create_directories(root);
  }
  ~Area() { fs::remove_all(root); }
  Area(const Area&) = delete;
  Area& operator=(const Area&) = delete;
  fs::path root;
};

std::size_t entries(const fs::path& dir) {
  return static_cast<std::size_t>(std::distance(fs::directory_iterator(dir), fs::directory_iterator()));
}

// The previous writer passed this too (it deleted the old files one by one, then wrote the new ones in place: a
// kill in between left a mix, which golden.kill_at_random catches); this guards the replacement itself.
TEST(WriteCase, ReplacesAPreviousCaseAsAWhole) {
  const Area area("replace");
  const fs::path dir = area.root / "case";
  const GoldenCase latent = read_case(kCases / "latent"), plain = read_case(kCases / "softmax_post");
  write_case(dir, latent);
  ASSERT_TRUE(fs::exists(dir / "latent_down.npy"));
  write_case(dir / "", plain);  // a trailing '/' names the same folder
  const GoldenCase back = read_case(dir);
  EXPECT_EQ(back.header.description, plain.header.description);
  EXPECT_FALSE(fs::exists(dir / "latent_down.npy"));
  EXPECT_EQ(entries(dir), plain.tensors.size() + 1);
  EXPECT_EQ(entries(area.root), 1u) << "no staging or old folder is left beside the case";
}

// Before: a subfolder named foo.npy failed with "filesystem error: cannot remove ...: Directory not empty", after
// other files of the folder had been deleted.
TEST(WriteCase, RefusesAFolderHoldingAnythingButACaseInOneLine) {
  const Area area("refuse");
  const fs::path dir = area.root / "case";
  const GoldenCase c = read_case(kCases / "softmax_post");
  write_case(dir, c);
  fs::create_directories(dir / "foo.npy" / "inner");
  const std::string what = test::expect_error<CaseFormatError>(
      "refusing to replace " + dir.string() +
          ": it holds 'foo.npy' (a directory), which is not a file of a golden case",
      [&] { write_case(dir, c); });
  EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  EXPECT_EQ(what.find("cannot remove"), std::string::npos) << what;
  EXPECT_EQ(entries(dir), c.tensors.size() + 2) << "nothing in the folder was removed";
  EXPECT_EQ(formats::read_npy(dir / "y.npy").reals, c.tensors.at("y").reals);
  EXPECT_EQ(entries(area.root), 1u) << "no staging folder is left beside it";
  fs::remove_all(dir / "foo.npy");
  std::ofstream(dir / "notes.txt") << "mine\n";
  test::expect_error<CaseFormatError>("it holds 'notes.txt' (a regular file)", [&] { write_case(dir, c); });
  EXPECT_TRUE(fs::exists(dir / "notes.txt"));
}

}  // namespace
}  // namespace moe::golden
