#include "storage/staged_directory.hpp"

#include "storage/durable_files.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace moe::storage {
namespace {

namespace fs = std::filesystem;

// Serial numbers of staging folders within this process (several writes may run at once, e.g. in tests).
std::atomic<std::int64_t> next_serial{0};

fs::path parent_of(const fs::path& target) {
  return target.has_parent_path() ? target.parent_path() : fs::path(".");
}

[[noreturn]] void fail_rename(const fs::path& from, const fs::path& to, int error) {
  throw StorageError("cannot rename " + from.string() + " to " + to.string() + ": " + std::strerror(error));
}

// Swaps two paths atomically. False when the system or file system cannot (the caller falls back); throws on
// any other error.
bool exchange(const fs::path& a, const fs::path& b) {
  if (std::getenv("MOE_ORACLE_NO_RENAME_EXCHANGE")) return false;
#if defined(__linux__) && defined(RENAME_EXCHANGE)
  if (::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) == 0) return true;
  if (errno == EINVAL || errno == ENOSYS || errno == ENOTSUP || errno == EOPNOTSUPP) return false;
  fail_rename(a, b, errno);
#else
  (void)a;
  (void)b;
  return false;
#endif
}

// MOE_ORACLE_COMMIT_PAUSE_US: the kill tests (storage/tests/kill_harness.hpp) widen the windows around the rename,
// which otherwise last microseconds, so that kills at random land in them too. Only the timing changes.
void pause_for_kill_tests() {
  const char* us = std::getenv("MOE_ORACLE_COMMIT_PAUSE_US");
  if (us != nullptr) std::this_thread::sleep_for(std::chrono::microseconds(std::atol(us)));
}

void rename_or_fail(const fs::path& from, const fs::path& to) {
  if (std::rename(from.c_str(), to.c_str()) != 0) fail_rename(from, to, errno);
}

}  // namespace

fs::path StagedDirectory::resolve_target(const fs::path& target) {
  fs::path t = target.lexically_normal();
  if (!t.has_filename() && t.has_parent_path()) t = t.parent_path();  // "out/" -> "out"
  if (t.empty() || !t.has_filename() || t.filename() == "." || t.filename() == "..")
    throw StorageError("cannot replace '" + target.string() + "': name the folder itself");
  std::error_code ec;
  if (fs::is_symlink(fs::symlink_status(t, ec))) t = fs::canonical(t);
  return t;
}

fs::path StagedDirectory::staging_path(const fs::path& target, Id id) {
  fs::path p = target;
  p += ".tmp-" + std::to_string(id.pid) + "-" + std::to_string(id.serial);
  return p;
}

StagedDirectory::StagedDirectory(const fs::path& target, const ReplaceableEntry& replaceable, const std::string& kind)
    : target_(resolve_target(target)) {
  recover_interrupted_write(target_);
  const fs::file_status status = fs::symlink_status(target_);
  if (fs::exists(status)) {
    if (!fs::is_directory(status))
      throw StorageError("refusing to replace " + target_.string() + ": it is " + file_kind(target_, false) +
                         ", not a " + kind + " folder");
    for (const auto& entry : fs::directory_iterator(target_)) {
      if (!replaceable(entry))
        throw StorageError("refusing to replace " + target_.string() + ": it holds '" +
                           entry.path().filename().string() + "' (" + file_kind(entry.path(), false) +
                           "), which is not a file of a " + kind);
    }
  }
  fs::create_directories(parent_of(target_));
  sweep_leftovers(target_);
  id_.pid = ::getpid();
  // Created and locked under a shared lock on the parent, so that no sweep sees it unlocked (write_leftovers.hpp).
  const FolderLock creating(parent_of(target_), FolderLock::Wait::yes, true);
  do {
    id_.serial = next_serial++;
    staging_ = staging_path(target_, id_);
  } while (!fs::create_directory(staging_));  // false: a folder of that name exists (left by a killed writer)
  lock_.emplace(staging_, FolderLock::Wait::no);
}

StagedDirectory::~StagedDirectory() {
  if (committed_) return;
  std::error_code ec;
  fs::remove_all(staging_, ec);  // a failed write: the target was not touched
}

void StagedDirectory::commit() {
  const fs::path parent = parent_of(target_);
  sync_directory(staging_);
  pause_for_kill_tests();
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(target_, ec))) {
    rename_or_fail(staging_, target_);
    committed_ = true;
    sync_directory(parent);
    lock_.reset();  // the write is over: the folder is the target's now
    return;
  }
  // The old version stays locked until it is removed, wherever it is renamed: a sweep leaves it to this writer,
  // and a reader finding the target missing waits for the second rename rather than restoring it.
  const FolderLock old_version(target_, FolderLock::Wait::yes);
  if (exchange(staging_, target_)) {
    committed_ = true;  // the target is the new version; staging_ now holds the old one
    sync_directory(parent);
    pause_for_kill_tests();
    fs::remove_all(staging_, ec);
    lock_.reset();
    return;
  }
  // The fallback: the old version goes aside first and is removed only once the new one is in place.
  fs::path aside = target_;
  aside += ".old-" + std::to_string(id_.pid) + "-" + std::to_string(id_.serial);
  rename_or_fail(target_, aside);
  pause_for_kill_tests();  // the one window of the fallback: no target, the old version complete at `aside`
  try {
    rename_or_fail(staging_, target_);
  } catch (...) {
    std::rename(aside.c_str(), target_.c_str());  // put the old version back
    throw;
  }
  committed_ = true;
  sync_directory(parent);
  pause_for_kill_tests();
  fs::remove_all(aside, ec);
  lock_.reset();
}

void StagedDirectory::recover(const fs::path& target, std::chrono::milliseconds wait_limit) {
  fs::path resolved;
  try {
    resolved = resolve_target(target);
  } catch (const std::exception&) {
    return;  // not a folder that can be written (".", a dangling link): no write of it to recover
  }
  recover_interrupted_write(resolved, wait_limit);
}

}  // namespace moe::storage
