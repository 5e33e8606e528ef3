// What a killed writer of a folder (staged_directory.hpp) leaves beside its target, and how the next writer or
// reader deals with it. A write of <target> makes <target>.tmp-<pid>-<n> (its staging folder) and, in the fallback
// without RENAME_EXCHANGE, <target>.old-<pid>-<n> (the old version set aside); a kill can leave either behind.
//
// Whose writer is gone is decided by a lock, not by the pid in the name (a pid says nothing on another machine
// sharing the file system, and is reused): every writer holds an exclusive flock(2) on its staging folder from the
// moment the folder exists until the write ends, and in the fallback also on the old version from before it is set
// aside until it is removed. The kernel drops a process's locks when it dies, SIGKILL included. So a leftover whose
// lock can be taken at once has no writer; one whose lock is held belongs to a live writer (a concurrent write of
// the same target) and is left alone. A writer creates and locks its staging folder under a shared lock on the
// parent folder, and a sweep looks under an exclusive one, so a folder between its mkdir and its lock is never
// taken for a leftover. Where a lock cannot be taken for another reason (a file system without flock), nothing is
// swept: a leftover kept is harmless, a live write removed is not.
//
// A leftover is only ever a real folder (not a symbolic link) named exactly <target name>.tmp-<digits>-<digits> or
// .old-<digits>-<digits> beside the target; nothing else in the parent folder is looked at.
//
// No wait is without a bound. A live writer holds a lock that another waits for during a rename or two (the
// fallback's window, widened only by the kill tests' pause); a lock held for seconds belongs to a writer that is
// stopped (SIGSTOP, a hung file system) or to some other process holding the folder, and waiting for it would
// hang the command silently. So every wait ends after kLockWaitLimit with a StorageError naming the folder and,
// where /proc/locks tells, the process that holds it.
#pragma once

#include <chrono>
#include <filesystem>
#include <string>

namespace moe::storage {

// How long any wait for another process's lock on a folder may last.
inline constexpr std::chrono::milliseconds kLockWaitLimit{5000};

// An exclusive flock on a folder, held while the object lives (or until release()).
class FolderLock {
 public:
  enum class Wait { no, yes };
  // Throws StorageError when the folder cannot be opened, and with Wait::yes when another process still holds the
  // lock after kLockWaitLimit (the message names it). held() says whether the lock was taken; busy() whether it was
  // not because another holds it (with Wait::no), rather than because the file system cannot lock.
  FolderLock(const std::filesystem::path& folder, Wait wait, bool shared = false);
  ~FolderLock();
  FolderLock(FolderLock&& other) noexcept;
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;
  FolderLock& operator=(FolderLock&&) = delete;

  bool held() const { return held_; }
  bool busy() const { return busy_; }
  void release();

 private:
  int fd_ = -1;
  bool held_ = false;
  bool busy_ = false;
};

// Who holds a lock on `folder`, for messages: "process 1234 (moe-oracle)" as /proc/locks and /proc/<pid>/comm say,
// or "another process" where they do not.
std::string lock_holder(const std::filesystem::path& folder);

enum class LeftoverKind { none, staging, aside };

// Whether `name` (a file name in the target's parent folder) is a staging (.tmp-) or aside (.old-) folder name of
// `target_name`.
LeftoverKind leftover_kind(const std::string& target_name, const std::string& name);

// The target name whose leftover `name` is ("case" for "case.tmp-12-3" and "case.old-12-0"); empty when `name` is
// no leftover's. For readers of a folder of targets, which must not take a leftover for a target of its own.
std::string leftover_target(const std::string& name);

// When `target` is missing because a writer without RENAME_EXCHANGE was stopped between its two renames, puts the
// complete old version (its .old- folder) back at `target`, the most recently set aside one when there are several.
// A writer still between its renames (its lock held) is waited for, as its new version is about to appear, but no
// longer than `wait_limit`: then StorageError names the folder, its holder and what to do. Does nothing when
// `target` exists or nothing was set aside. StorageError when the old version cannot be renamed back (the message
// says where it is).
void recover_interrupted_write(const std::filesystem::path& target,
                               std::chrono::milliseconds wait_limit = kLockWaitLimit);

// Removes the leftovers of `target` whose writers are gone (see above); the .old- folders only when `target`
// exists (otherwise one of them is the old version: recover_interrupted_write first). Returns how many were removed.
int sweep_leftovers(const std::filesystem::path& target);

}  // namespace moe::storage
