// storage/write_leftovers.hpp: what killed writers leave beside a folder is cleaned up by the next write (the
// staging and .old- folders whose writer is gone) and the old version set aside by a writer killed between the
// fallback's two renames is put back by the next reader or writer, while a live writer's folders are left alone.
#include "reference/tests/expect_error.hpp"
#include "storage/durable_files.hpp"
#include "storage/staged_directory.hpp"
#include "storage/tests/staging_area.hpp"
#include "storage/write_leftovers.hpp"

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <thread>
#include <vector>

namespace moe::storage {
namespace {

namespace fs = std::filesystem;

using fixture::Area;
using fixture::read;
using fixture::txt_file;

// Runs `body` in a child process with `env` set there; returns its pid.
template <typename F>
pid_t child(const std::vector<std::pair<std::string, std::string>>& env, F&& body) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    try {
      body();
    } catch (...) {
      ::_exit(2);
    }
    ::_exit(0);
  }
  return pid;
}

int wait_for(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
  }
  return status;
}

TEST(WriteLeftovers, NamesAreRecognisedExactly) {
  EXPECT_EQ(leftover_kind("out", "out.tmp-12-3"), LeftoverKind::staging);
  EXPECT_EQ(leftover_kind("out", "out.old-12-0"), LeftoverKind::aside);
  for (const char* other : {"out", "out.tmp-", "out.tmp-1", "out.tmp-1-", "out.tmp--1", "out.tmp-1-2x", "out.tmp-a-2",
                            "out2.tmp-1-2", "ou.tmp-1-2", "out.new-1-2", "out.tmp-1-2-3", "xout.tmp-1-2"})
    EXPECT_EQ(leftover_kind("out", other), LeftoverKind::none) << other;
}

// For readers of a folder of targets (golden verify FOLDER): which target a leftover belongs to.
TEST(WriteLeftovers, TheTargetOfALeftoverIsItsNameBeforeTheTag) {
  EXPECT_EQ(leftover_target("case.tmp-12-3"), "case");
  EXPECT_EQ(leftover_target("case.old-12-0"), "case");
  EXPECT_EQ(leftover_target("a.old-1-2.tmp-3-4"), "a.old-1-2");
  for (const char* other : {"case", ".tmp-1-2", "case.tmp-1", "case.old-1-2x", "case.new-1-2", "case.tmp-a-2"})
    EXPECT_EQ(leftover_target(other), "") << other;
}

// Before: every killed write left its staging folder for good (147 after 200 kills); now the next write removes
// them. The writers here are killed (SIGKILL) while their staging folder holds a partial version.
TEST(WriteLeftovers, TheNextWriteSweepsTheStagingFoldersOfKilledWriters) {
  const Area area("sweep");
  area.write("1");
  // Three writers alive at once (each a concurrent writer to the others, so none sweeps another), then killed.
  std::vector<pid_t> writers;
  for (int i = 0; i < 3; ++i)
    writers.push_back(child({}, [&] {
      StagedDirectory staged(area.target(), txt_file, "test");
      write_file_synced(staged.path() / "a.txt", "partial");
      ::pause();
    }));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (area.beside().size() < 3 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // their partial files written
  for (const pid_t pid : writers) {
    ::kill(pid, SIGKILL);
    ASSERT_TRUE(WIFSIGNALED(wait_for(pid)));
  }
  ASSERT_EQ(area.beside().size(), 3u) << "three killed writers left their staging folders";
  area.write("2");
  EXPECT_EQ(read(area.target() / "a.txt"), "2");
  EXPECT_TRUE(area.beside().empty()) << "swept by the next write";
}

// A concurrent writer's staging folder holds its lock: the sweep leaves it, and that writer still commits. Names
// that only resemble a leftover's, a link, a file, another target's folders are never touched.
TEST(WriteLeftovers, ALiveWritersFolderAndLookalikesAreLeftAlone) {
  const Area area("concurrent");
  area.write("1");
  const fs::path dir = area.root / "area";
  for (const char* name : {"out.tmp-1-2x", "out.tmp-1", "out2.tmp-1-2", "out.keep-1-2"}) fs::create_directory(dir / name);
  std::ofstream(dir / "out.tmp-7-8") << "a file";
  fs::create_directory(area.root / "elsewhere");
  fs::create_directory_symlink(area.root / "elsewhere", dir / "out.tmp-5-6");
  const std::set<std::string> lookalikes = area.beside();

  StagedDirectory other(area.target(), txt_file, "test");  // a concurrent writer, mid-write
  write_file_synced(other.path() / "a.txt", "other");
  area.write("2");
  EXPECT_TRUE(fs::exists(other.path() / "a.txt")) << "the live writer's staging folder was swept";
  other.commit();
  EXPECT_EQ(read(area.target() / "a.txt"), "other");
  EXPECT_EQ(area.beside(), lookalikes);
  EXPECT_TRUE(fs::is_directory(area.root / "elsewhere"));
}

// A writer without RENAME_EXCHANGE, paused between its two renames (MOE_ORACLE_COMMIT_PAUSE_US) and killed there:
// the target is missing and the old version complete aside, as the old code left it for good.
pid_t kill_between_the_renames(const Area& area) {
  const pid_t pid = child({{"MOE_ORACLE_NO_RENAME_EXCHANGE", "1"}, {"MOE_ORACLE_COMMIT_PAUSE_US", "2000000"}},
                          [&] { area.write("2"); });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (fs::exists(area.target()) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ::kill(pid, SIGKILL);
  wait_for(pid);
  return pid;
}

void expect_old_aside(const Area& area) {
  ASSERT_FALSE(fs::exists(area.target())) << "the kill did not land between the renames";
  bool aside = false;
  for (const std::string& name : area.beside()) aside = aside || name.rfind("out.old-", 0) == 0;
  ASSERT_TRUE(aside) << "no .old- folder beside the target";
}

TEST(WriteLeftovers, AReaderPutsBackTheOldVersionOfAWriteKilledBetweenTheRenames) {
  const Area area("recover_reader");
  area.write("1");
  kill_between_the_renames(area);
  expect_old_aside(area);
  StagedDirectory::recover(area.target());
  EXPECT_EQ(read(area.target() / "a.txt"), "1") << "the complete old version is back";
  EXPECT_EQ(read(area.target() / "b.txt"), "1");
  for (const std::string& name : area.beside()) EXPECT_NE(name.rfind("out.old-", 0), 0u) << name;
}

TEST(WriteLeftovers, TheNextWriterPutsBackTheOldVersionThenReplacesIt) {
  const Area area("recover_writer");
  area.write("1");
  kill_between_the_renames(area);
  expect_old_aside(area);
  area.write("3");
  EXPECT_EQ(read(area.target() / "a.txt"), "3");
  EXPECT_TRUE(area.beside().empty()) << "the staging folder of the killed write is swept too";
}

// A reader that finds the target missing while the writer is alive between its renames waits for the new version
// rather than restoring the old one under the writer's feet.
TEST(WriteLeftovers, AReaderWaitsForALiveWriterBetweenItsRenames) {
  const Area area("recover_live");
  area.write("1");
  const pid_t pid = child({{"MOE_ORACLE_NO_RENAME_EXCHANGE", "1"}, {"MOE_ORACLE_COMMIT_PAUSE_US", "300000"}},
                          [&] { area.write("2"); });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (fs::exists(area.target()) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_FALSE(fs::exists(area.target()));
  StagedDirectory::recover(area.target());
  EXPECT_EQ(read(area.target() / "a.txt"), "2") << "the writer's new version, not the old one restored";
  const int status = wait_for(pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the writer failed";
}

}  // namespace
}  // namespace moe::storage
