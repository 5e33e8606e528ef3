// storage/: a folder replaced as a whole (both the RENAME_EXCHANGE path and the rename-aside fallback), refused
// when it holds something that is not a previous version's file, untouched when a write fails; files read only
// when they are regular files, names only when they stay inside their folder.
#include "reference/tests/expect_error.hpp"
#include "storage/durable_files.hpp"
#include "storage/staged_directory.hpp"
#include "storage/tests/staging_area.hpp"

#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <iterator>

namespace moe::storage {
namespace {

namespace fs = std::filesystem;

using fixture::Area;
using fixture::read;
using fixture::txt_file;

// Runs `body` with MOE_ORACLE_NO_RENAME_EXCHANGE set (the fallback) or unset.
template <typename F>
void with_fallback(bool fallback, F&& body) {
  if (fallback) ::setenv("MOE_ORACLE_NO_RENAME_EXCHANGE", "1", 1);
  body();
  ::unsetenv("MOE_ORACLE_NO_RENAME_EXCHANGE");
}

TEST(StagedDirectory, CreatesThenReplacesAsAWhole) {
  for (const bool fallback : {false, true}) {
    const Area area(fallback ? "replace_fallback" : "replace");
    with_fallback(fallback, [&] {
      area.write("1");
      EXPECT_EQ(read(area.target() / "a.txt"), "1");
      EXPECT_TRUE(fs::exists(area.target() / "b.txt"));
      area.write("2");
      EXPECT_EQ(read(area.target() / "a.txt"), "2");
      EXPECT_FALSE(fs::exists(area.target() / "b.txt")) << "the old version's files do not survive";
      EXPECT_TRUE(area.beside().empty()) << "no staging or old folder is left";
    });
  }
}

TEST(StagedDirectory, ATrailingSlashOrASymlinkNamesTheFolderItself) {
  const Area area("names");
  StagedDirectory slash(area.target().string() + "/", txt_file, "test");
  EXPECT_EQ(slash.target(), area.target());
  EXPECT_EQ(slash.path().parent_path(), area.target().parent_path()) << "the staging folder is beside the target";
  slash.commit();
  // A link to a folder: the folder it points to is replaced, the link stays.
  const fs::path link = area.root / "link";
  fs::create_directory_symlink(area.target(), link);
  StagedDirectory through(link, txt_file, "test");
  write_file_synced(through.path() / "a.txt", "via link");
  through.commit();
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(read(area.target() / "a.txt"), "via link");
  for (const char* bad : {".", "..", "/"})
    test::expect_error<StorageError>("name the folder itself", [&] { StagedDirectory s(bad, txt_file, "test"); });
}

// Before (golden's prepare_case_directory): a subfolder named foo.npy failed with "filesystem error: cannot remove".
TEST(StagedDirectory, RefusesATargetHoldingAnythingButAPreviousVersion) {
  const Area area("refuse");
  area.write("1");
  fs::create_directory(area.target() / "sub.txt");
  std::string what = test::expect_error<StorageError>("it holds 'sub.txt' (a directory), which is not a file of a test",
                                                      [&] { area.write("2"); });
  EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  fs::remove(area.target() / "sub.txt");
  fs::create_symlink("/etc/hostname", area.target() / "link.txt");
  test::expect_error<StorageError>("'link.txt' (a symbolic link)", [&] { area.write("2"); });
  fs::remove(area.target() / "link.txt");
  std::ofstream(area.target() / "notes.md") << "mine";
  test::expect_error<StorageError>("'notes.md' (a regular file)", [&] { area.write("2"); });
  EXPECT_EQ(read(area.target() / "a.txt"), "1") << "nothing was touched";
  EXPECT_EQ(read(area.target() / "notes.md"), "mine");
  EXPECT_TRUE(area.beside().empty());

  fs::remove_all(area.target());
  std::ofstream(area.target()) << "a file";
  test::expect_error<StorageError>("it is a regular file, not a test folder", [&] { area.write("2"); });
}

TEST(StagedDirectory, AFailedWriteLeavesTheTargetAndRemovesTheStagingFolder) {
  const Area area("failed");
  area.write("1");
  try {
    StagedDirectory staged(area.target(), txt_file, "test");
    write_file_synced(staged.path() / "a.txt", "half");
    throw std::runtime_error("the writer failed");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(read(area.target() / "a.txt"), "1");
  EXPECT_TRUE(area.beside().empty());
}

TEST(RegularFile, RefusesWhatIsNotARegularFileWithoutOpeningIt) {
  const Area area("regular");
  const fs::path fifo = area.root / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  auto opened = std::async(std::launch::async, [&] {
    test::expect_error<StorageError>("is not a regular file (it is a FIFO)", [&] { RegularFile f(fifo); });
  });
  ASSERT_EQ(opened.wait_for(std::chrono::seconds(5)), std::future_status::ready) << "blocked on a FIFO";
  opened.get();
  test::expect_error<StorageError>("is not a regular file (it is a directory)", [&] { RegularFile f(area.root); });
  test::expect_error<StorageError>("missing (no such file)", [&] { RegularFile f(area.root / "none"); });
  write_file_synced(area.root / "x", "abc");
  RegularFile f(area.root / "x");
  EXPECT_EQ(f.read_all(), "abc");
  test::expect_error<StorageError>("more than the 2 allowed", [&] { (void)f.read_all(2); });
}

TEST(ConfinedFile, TakesPlainNamesAndLinksThatStayInside) {
  const Area area("confined");
  const fs::path folder = area.root / "area";
  for (const char* bad : {"", ".", "..", "../x", "/etc/passwd", "a/b"})
    test::expect_error<StorageError>("must be a plain file name in the folder", [&] {
      (void)confined_file(folder, bad, "the folder");
    });
  EXPECT_EQ(confined_file(folder, "a.bin", "the folder"), folder / "a.bin");
  write_file_synced(folder / "real.bin", "x");
  fs::create_symlink("real.bin", folder / "inside.bin");
  EXPECT_EQ(confined_file(folder, "inside.bin", "the folder"), folder / "inside.bin");
  write_file_synced(area.root / "outside.bin", "y");
  fs::create_symlink("../area/../outside.bin", folder / "out.bin");
  test::expect_error<StorageError>("the symbolic link leaves the folder", [&] {
    (void)confined_file(folder, "out.bin", "the folder");
  });
  fs::create_symlink("nowhere.bin", folder / "dangling.bin");
  test::expect_error<StorageError>("the symbolic link leads nowhere", [&] {
    (void)confined_file(folder, "dangling.bin", "the folder");
  });
  fs::create_symlink(folder, folder / "self.bin");
  test::expect_error<StorageError>("leaves the folder", [&] { (void)confined_file(folder, "self.bin", "the folder"); });
}

}  // namespace
}  // namespace moe::storage
