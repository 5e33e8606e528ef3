#include "storage/durable_files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace moe::storage {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void fail_errno(const fs::path& path, const std::string& doing) {
  throw StorageError(path.string() + ": " + doing + ": " + std::strerror(errno));
}

std::string kind_of(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "of an unknown kind";
}

}  // namespace

void write_file_synced(const fs::path& path, std::string_view bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail_errno(path, "cannot create");
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int saved = errno;
      ::close(fd);
      errno = saved;
      fail_errno(path, "cannot write");
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const int saved = errno;
    ::close(fd);
    errno = saved;
    fail_errno(path, "cannot fsync");
  }
  if (::close(fd) != 0) fail_errno(path, "cannot close");
}

void sync_directory(const fs::path& dir) {
  const fs::path p = dir.empty() ? fs::path(".") : dir;
  const int fd = ::open(p.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail_errno(p, "cannot open the folder to fsync it");
  // Some file systems cannot fsync a directory (EINVAL): their renames are as durable as they get.
  if (::fsync(fd) != 0 && errno != EINVAL) {
    const int saved = errno;
    ::close(fd);
    errno = saved;
    fail_errno(p, "cannot fsync the folder");
  }
  ::close(fd);
}

std::string file_kind(const fs::path& path, bool follow_symlinks) {
  struct stat st {};
  if ((follow_symlinks ? ::stat(path.c_str(), &st) : ::lstat(path.c_str(), &st)) != 0) return "missing";
  return kind_of(st.st_mode);
}

RegularFile::RegularFile(const fs::path& path) : path_(path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) throw StorageError(path.string() + ": missing (no such file)");
    fail_errno(path, "cannot stat");
  }
  if (!S_ISREG(st.st_mode))
    throw StorageError(path.string() + ": is not a regular file (it is " + kind_of(st.st_mode) + ")");
  // O_NONBLOCK: should the path have become a FIFO since stat(), open() still returns at once.
  fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd_ < 0) fail_errno(path, "cannot open");
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    throw StorageError(path.string() + ": is not a regular file (it changed while being opened)");
  }
  size_ = static_cast<std::uint64_t>(st.st_size);
}

RegularFile::~RegularFile() {
  if (fd_ >= 0) ::close(fd_);
}

void RegularFile::read(char* out, std::size_t n) {
  std::size_t done = 0;
  while (done < n) {
    const ssize_t got = ::pread(fd_, out + done, n - done, static_cast<off_t>(done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) fail_errno(path_, "cannot read");
    if (got == 0) throw StorageError(path_.string() + ": ends after " + std::to_string(done) + " bytes, expected " +
                                     std::to_string(n));
    done += static_cast<std::size_t>(got);
  }
}

std::string RegularFile::read_all(std::uint64_t limit) {
  if (size_ > limit) throw StorageError(path_.string() + ": " + std::to_string(size_) + " bytes, more than the " +
                                        std::to_string(limit) + " allowed");
  std::string bytes(static_cast<std::size_t>(size_), '\0');
  read(bytes.data(), bytes.size());
  return bytes;
}

std::string one_line(std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    const auto byte = static_cast<unsigned char>(ch);
    if (byte < 0x20 || byte == 0x7f) {
      out += "\\x";
      out += kHex[byte >> 4];
      out += kHex[byte & 15];
    } else {
      out += ch;
    }
  }
  return out;
}

fs::path confined_file(const fs::path& folder, const std::string& name, const std::string& what) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
      name.find('\0') != std::string::npos) {
    throw StorageError("'" + name + "' must be a plain file name in " + what + " (no '/', not '.' or '..')");
  }
  const fs::path path = folder / name;
  std::error_code ec;
  if (!fs::is_symlink(fs::symlink_status(path, ec))) return path;
  // Where the link leads, with every link on the way resolved, must lie inside the folder (itself resolved: the
  // folder may be reached through a link, e.g. "latest" -> "step-100").
  const fs::path resolved = fs::canonical(path, ec);
  if (ec) throw StorageError(path.string() + ": the symbolic link leads nowhere (" + ec.message() + ")");
  const fs::path inside = fs::canonical(folder, ec);
  if (ec) throw StorageError(folder.string() + ": cannot resolve: " + ec.message());
  const auto [f, r] = std::mismatch(inside.begin(), inside.end(), resolved.begin(), resolved.end());
  if (f != inside.end() || r == resolved.end()) {
    throw StorageError(path.string() + ": the symbolic link leaves " + what + " (it resolves to " +
                       resolved.string() + ")");
  }
  return path;
}

}  // namespace moe::storage
