#include "storage/write_leftovers.hpp"

#include "storage/durable_files.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>
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

// The waits poll (flock without LOCK_NB cannot be bounded): from 1 ms, doubling to 50 ms between tries, so that a
// lock held for a rename is taken within a millisecond or two and a long one costs ~20 wake-ups a second.
using Clock = std::chrono::steady_clock;
constexpr std::chrono::milliseconds kFirstPause{1}, kLongestPause{50};

// Calls `attempt` until it returns true (then true) or `limit` has passed (then false), pausing between tries.
template <typename Attempt>
bool retry_for(std::chrono::milliseconds limit, Attempt&& attempt) {
  const Clock::time_point deadline = Clock::now() + limit;
  for (auto pause = kFirstPause;; pause = std::min(2 * pause, kLongestPause)) {
    if (attempt()) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(pause);
  }
}

std::string seconds(std::chrono::milliseconds limit) {
  std::ostringstream s;
  s << static_cast<double>(limit.count()) / 1000 << " s";
  return s.str();
}

}  // namespace

std::string lock_holder(const fs::path& folder) {
  struct stat st {};
  if (::stat(folder.c_str(), &st) != 0) return "another process";
  // /proc/locks: "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF", the device as major:minor in hex; a line
  // "1: -> FLOCK ..." is a process waiting for that lock, not holding it.
  char device[64];
  std::snprintf(device, sizeof device, "%02x:%02x:%llu", ::major(st.st_dev), ::minor(st.st_dev),
                static_cast<unsigned long long>(st.st_ino));
  std::ifstream locks("/proc/locks");
  for (std::string line; std::getline(locks, line);) {
    std::istringstream fields(line);
    std::string id, type, mode, access, pid, where;
    fields >> id >> type;
    if (type == "->") continue;
    fields >> mode >> access >> pid >> where;
    if (type != "FLOCK" || where != device || pid.empty() || pid[0] == '-') continue;
    std::string name;
    std::getline(std::ifstream("/proc/" + pid + "/comm"), name);
    return "process " + pid + (name.empty() ? "" : " (" + name + ")");
  }
  return "another process";
}

FolderLock::FolderLock(const fs::path& folder, Wait wait, bool shared) {
  fd_ = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd_ < 0) throw StorageError(folder.string() + ": cannot open the folder to lock it: " + std::strerror(errno));
  const int op = (shared ? LOCK_SH : LOCK_EX) | LOCK_NB;
  const bool settled = retry_for(wait == Wait::no ? std::chrono::milliseconds(0) : kLockWaitLimit, [&] {
    int rc = 0;
    while ((rc = ::flock(fd_, op)) != 0 && errno == EINTR) {
    }
    held_ = rc == 0;
    busy_ = rc != 0 && errno == EWOULDBLOCK;  // otherwise (ENOLCK, ...) this file system cannot say
    return !busy_;
  });
  if (!settled && wait == Wait::yes) {
    release();
    throw StorageError(folder.string() + " is locked by " + lock_holder(folder) + ", still after " +
                       seconds(kLockWaitLimit) + " (a write of it running or stopped); try again when it is done");
  }
}

FolderLock::~FolderLock() { release(); }

FolderLock::FolderLock(FolderLock&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), held_(std::exchange(other.held_, false)) {}

void FolderLock::release() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor drops the lock
  fd_ = -1;
  held_ = false;
  busy_ = false;
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

void recover_interrupted_write(const fs::path& target, std::chrono::milliseconds wait_limit) {
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
    // A live writer between its renames holds the lock on its old version: its new version is about to appear,
    // which ends the wait as well as the lock coming free does.
    std::optional<FolderLock> lock;
    bool target_back = false;
    const bool settled = retry_for(wait_limit, [&] {
      target_back = fs::exists(fs::symlink_status(target, ec));  // the writer put the new version in place
      if (target_back) return true;
      try {
        lock.emplace(old, FolderLock::Wait::no);
      } catch (const StorageError&) {
        lock.reset();  // gone meanwhile (its writer finished, or another reader restored it)
        return true;
      }
      if (!lock->busy()) return true;
      lock.reset();
      return false;
    });
    if (target_back) return;
    if (!settled)
      throw StorageError(target.string() + " is missing: a write replacing it set the previous version aside at " +
                         old.string() + ", which " + lock_holder(old) + " still holds locked after " +
                         seconds(wait_limit) + " without putting a new version in place (a writer stopped?); "
                         "when no write of it is running, rename that folder back to " + target.filename().string());
    if (!lock) continue;
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
