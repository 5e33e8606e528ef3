// A folder (a checkpoint, a golden case) replaced as a whole, so that a crash or a kill at any instant leaves at its
// path either the complete old version or the complete new one, never a mix and never nothing:
//
//   1. the new version is written into a staging folder beside the target, <target>.tmp-<pid>-<n>, every file
//      fsynced as it is written (write_file_synced);
//   2. commit() fsyncs the staging folder, then swaps it with the target in one renameat2(RENAME_EXCHANGE) (Linux
//      3.15+, on file systems that support it), fsyncs the parent folder, and only then removes the old version
//      (now at the staging path);
//   3. a target that does not exist yet is created by one rename().
//
// Where RENAME_EXCHANGE is unavailable (another OS, a file system answering EINVAL, or the environment variable
// MOE_ORACLE_NO_RENAME_EXCHANGE set, which the kill tests use to exercise this path), the fallback renames the old
// version aside to <target>.old-<pid>-<n>, renames the staging folder into place and removes the old one. Between
// those two renames — one rename(2) long — the target path does not exist; the old version is then complete at
// its .old- path. The old version is never deleted before the new one is in place.
//
// MOE_ORACLE_COMMIT_PAUSE_US=N makes commit() sleep N µs in each of those windows (before the rename, between the
// fallback's renames, before the old version is removed): the kill tests use it so that kills at random land in
// windows that otherwise last microseconds. It changes the timing only.
//
// A killed writer leaves its staging folder (an incomplete new version, or after the swap the old version being
// removed) or an .old- folder beside the target. The next write of the same target cleans up after it before it
// stages anything (write_leftovers.hpp): where the target is missing and the old version is complete aside, it
// puts it back; it then removes the staging and .old- folders whose writers are gone, which a lock tells apart
// from those of a concurrent writer. A failed write (an exception) removes the staging folder and leaves the
// target untouched.
#pragma once

#include "storage/write_leftovers.hpp"

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>

namespace moe::storage {

// Which existing entries a target may hold for it to be replaced: the files of a previous version, nothing else.
// A folder holding anything else (someone's home directory given by mistake) is refused, not deleted.
using ReplaceableEntry = std::function<bool(const std::filesystem::directory_entry& entry)>;

class StagedDirectory {
 public:
  // Where the staging folder of a write is; ranks of a collective write agree on it through the Id.
  struct Id {
    std::int64_t pid = 0;
    std::int64_t serial = 0;
  };

  // Recovers an interrupted write of `target` (recover_interrupted_write), checks that `target` may be replaced
  // (absent, or a folder whose every entry `replaceable` accepts; a symbolic link is resolved and the folder it
  // points to is replaced), sweeps the leftovers of killed writers (sweep_leftovers) and creates the staging folder,
  // locked while this object lives, and the target's parent folders if needed. `kind` names the content in refusals ("checkpoint", "golden case").
  StagedDirectory(const std::filesystem::path& target, const ReplaceableEntry& replaceable, const std::string& kind);
  // Removes the staging folder unless commit() succeeded.
  ~StagedDirectory();
  StagedDirectory(const StagedDirectory&) = delete;
  StagedDirectory& operator=(const StagedDirectory&) = delete;

  const std::filesystem::path& path() const { return staging_; }
  const std::filesystem::path& target() const { return target_; }
  Id id() const { return id_; }

  // Puts the staging folder in place of the target (see above). Every file in it must already be fsynced.
  void commit();

  // The target as it is replaced: lexically normal, without a trailing '/', a symbolic link resolved.
  static std::filesystem::path resolve_target(const std::filesystem::path& target);
  // For readers: puts the old version of `target` back where a write without RENAME_EXCHANGE was stopped between
  // its two renames (recover_interrupted_write on the resolved target, waiting at most `wait_limit` for a writer
  // still between them). Every reader of a staged folder (checkpoint, golden case) calls this one.
  static void recover(const std::filesystem::path& target, std::chrono::milliseconds wait_limit = kLockWaitLimit);
  // The staging folder of write `id` for `target` (as resolve_target gives it).
  static std::filesystem::path staging_path(const std::filesystem::path& target, Id id);

 private:
  std::filesystem::path target_;
  std::filesystem::path staging_;
  Id id_;
  std::optional<FolderLock> lock_;  // on the staging folder: it has a live writer (write_leftovers.hpp)
  bool committed_ = false;
};

}  // namespace moe::storage
