// No wait without a bound and a message (storage/write_leftovers.hpp): a reader that finds a folder missing and its
// previous version set aside under another process's lock, or a writer waiting for a lock on a folder, gives up
// after its limit with a StorageError naming the folder and the process that holds it. Before, `checkpoint verify`
// waited forever and silently on a locked .old- folder beside a missing checkpoint.
#include "storage/durable_files.hpp"
#include "storage/staged_directory.hpp"
#include "storage/tests/staging_area.hpp"
#include "storage/write_leftovers.hpp"

#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>

namespace moe::storage {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

using fixture::Area;
using fixture::read;

std::string this_process() { return "process " + std::to_string(::getpid()); }

TEST(BoundedWait, AReaderGivesUpOnALockedOldVersionAndSaysWhoHoldsIt) {
  const Area area("bounded_reader");
  area.write("1");
  fs::path aside = area.target();
  aside += ".old-4242-0";
  fs::rename(area.target(), aside);  // a writer stopped between its renames, its lock still held
  std::optional<FolderLock> writer(std::in_place, aside, FolderLock::Wait::no);
  ASSERT_TRUE(writer->held());

  const auto start = Clock::now();
  std::string what;
  try {
    StagedDirectory::recover(area.target(), std::chrono::milliseconds(300));
  } catch (const StorageError& e) {
    what = e.what();
  }
  const auto waited = Clock::now() - start;
  EXPECT_NE(what.find(area.target().string() + " is missing"), std::string::npos) << what;
  EXPECT_NE(what.find(aside.string()), std::string::npos) << what;
  EXPECT_NE(what.find(this_process()), std::string::npos) << "names the holder: " << what;
  EXPECT_NE(what.find("after 0.3 s"), std::string::npos) << what;
  EXPECT_GE(waited, std::chrono::milliseconds(300));
  EXPECT_LT(waited, std::chrono::seconds(3));
  EXPECT_FALSE(fs::exists(area.target())) << "nothing restored under a live lock";

  writer.reset();  // the writer is gone: the next reader puts the old version back
  StagedDirectory::recover(area.target());
  EXPECT_EQ(read(area.target() / "a.txt"), "1");
}

TEST(BoundedWait, AWaitForAFolderLockEndsAtTheLimitNamingTheHolder) {
  const Area area("bounded_lock");
  const fs::path folder = area.root / "area";
  const FolderLock holder(folder, FolderLock::Wait::no);
  ASSERT_TRUE(holder.held());
  const FolderLock tried(folder, FolderLock::Wait::no);
  EXPECT_FALSE(tried.held());
  EXPECT_TRUE(tried.busy()) << "held by another, not a file system without locks";

  const auto start = Clock::now();
  std::string what;
  try {
    const FolderLock waiting(folder, FolderLock::Wait::yes);
  } catch (const StorageError& e) {
    what = e.what();
  }
  const auto waited = Clock::now() - start;
  EXPECT_NE(what.find(folder.string() + " is locked by " + this_process()), std::string::npos) << what;
  EXPECT_GE(waited, kLockWaitLimit);
  EXPECT_LT(waited, kLockWaitLimit + std::chrono::seconds(3));
}

}  // namespace
}  // namespace moe::storage
