#include "storage/write_leftovers.hpp"

#include "storage/durable_files.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

namespace moe::storage {
namespace {

namespace fs = std::filesystem;

fs::path parent_of(const fs::path& target) {
  return target.has_parent_path() ? target.parent_path() : fs::path(".");
}

bool digits(const std::string& s) {
  return !s.empty() && s.size() <= 20 && s.find_first_not_of("0123456789") == std::string::npos;
}

// When a folder's entry last changed: a rename sets it, so the .old- folder set aside last has the latest.
struct timespec changed_at(const fs::path& p) {
  struct stat st {};
  if (::lstat(p.c_str(), &st) != 0) return {};
  return st.st_ctim;
}

}  // namespace

FolderLock::FolderLock(const fs::path& folder, Wait wait, bool shared) {
  fd_ = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd_ < 0) throw StorageError(folder.string() + ": cannot open the folder to lock it: " + std::strerror(errno));
  const int op = (shared ? LOCK_SH : LOCK_EX) | (wait == Wait::no ? LOCK_NB : 0);
  int rc = 0;
  while ((rc = ::flock(fd_, op)) != 0 && errno == EINTR) {
  }
  held_ = rc == 0;  // EWOULDBLOCK: another holds it; ENOLCK, EBADF, ...: this file system cannot say
}

FolderLock::~FolderLock() { release(); }

FolderLock::FolderLock(FolderLock&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), held_(std::exchange(other.held_, false)) {}

void FolderLock::release() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor drops the lock
  fd_ = -1;
  held_ = false;
}

LeftoverKind leftover_kind(const std::string& target_name, const std::string& name) {
  if (target_name.empty() || name.size() <= target_name.size() + 5 || name.compare(0, target_name.size(), target_name))
    return LeftoverKind::none;
  const std::string tag = name.substr(target_name.size(), 5);
  const LeftoverKind kind = tag == ".tmp-" ? LeftoverKind::staging : tag == ".old-" ? LeftoverKind::aside
                                                                                     : LeftoverKind::none;
  const std::string id = name.substr(target_name.size() + 5);  // <pid>-<n>
  const auto dash = id.find('-');
  if (kind == LeftoverKind::none || dash == std::string::npos || !digits(id.substr(0, dash)) ||
      !digits(id.substr(dash + 1)))
    return LeftoverKind::none;
  return kind;
}

std::string leftover_target(const std::string& name) {
  for (const char* tag : {".tmp-", ".old-"}) {
    const auto at = name.rfind(tag);
    if (at != std::string::npos && at > 0 && leftover_kind(name.substr(0, at), name) != LeftoverKind::none)
      return name.substr(0, at);
  }
  return {};
}

void recover_interrupted_write(const fs::path& target) {
  std::error_code ec;
  if (target.filename().empty() || fs::exists(fs::symlink_status(target, ec))) return;
  const fs::path parent = parent_of(target);
  std::vector<fs::path> aside;
  for (const auto& e : fs::directory_iterator(parent, ec))
    if (leftover_kind(target.filename().string(), e.path().filename().string()) == LeftoverKind::aside &&
        fs::is_directory(e.symlink_status(ec)))
      aside.push_back(e.path());
  std::sort(aside.begin(), aside.end(), [](const fs::path& a, const fs::path& b) {
    const timespec x = changed_at(a), y = changed_at(b);
    return x.tv_sec != y.tv_sec ? x.tv_sec > y.tv_sec : x.tv_nsec > y.tv_nsec;  // the latest first
  });
  for (const fs::path& old : aside) {
    std::optional<FolderLock> lock;
    try {
      lock.emplace(old, FolderLock::Wait::yes);  // a live writer between its renames finishes first
    } catch (const StorageError&) {
      continue;  // gone meanwhile (its writer finished, or another reader restored it)
    }
    if (fs::exists(fs::symlink_status(target, ec))) return;  // the writer put the new version in place
    if (!fs::is_directory(fs::symlink_status(old, ec))) continue;
    if (std::rename(old.c_str(), target.c_str()) != 0)
      throw StorageError(target.string() + " is missing: a write replacing it was interrupted, and the previous "
                         "version, complete at " + old.string() + ", cannot be renamed back: " + std::strerror(errno));
    sync_directory(parent);
    return;
  }
}

int sweep_leftovers(const fs::path& target) {
  const fs::path parent = parent_of(target);
  const std::string target_name = target.filename().string();
  std::vector<std::pair<fs::path, FolderLock>> gone;  // leftovers whose lock this sweep holds
  try {
    // Exclusive on the parent: no writer is between creating its staging folder and locking it (see the header).
    FolderLock looking(parent, FolderLock::Wait::yes);
    if (!looking.held()) return 0;
    std::error_code ec;
    const bool target_exists = fs::exists(fs::symlink_status(target, ec));
    for (const auto& e : fs::directory_iterator(parent)) {
      const LeftoverKind kind = leftover_kind(target_name, e.path().filename().string());
      if (kind == LeftoverKind::none || (kind == LeftoverKind::aside && !target_exists)) continue;
      if (!fs::is_directory(e.symlink_status(ec))) continue;  // never a link, a file or anything else
      try {
        FolderLock lock(e.path(), FolderLock::Wait::no);
        if (lock.held()) gone.emplace_back(e.path(), std::move(lock));
      } catch (const StorageError&) {
      }  // removed meanwhile, or unreadable: left alone
    }
  } catch (const StorageError&) {
    return 0;  // the parent cannot be locked: nothing is swept (see the header)
  } catch (const fs::filesystem_error&) {
    return 0;
  }
  int removed = 0;
  for (auto& [path, lock] : gone) {
    std::error_code ec;
    fs::remove_all(path, ec);
    if (!ec) ++removed;
  }
  return removed;
}

}  // namespace moe::storage
