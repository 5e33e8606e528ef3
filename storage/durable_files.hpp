// Files on disk, both ways: what the project writes must survive a crash or a kill (written, then fsynced), and
// what it reads may be hostile (a name from metadata may point out of its folder, a "file" may be a FIFO that
// blocks open() forever, a device, a directory). POSIX only; errors are StorageError, one line naming the path.
#pragma once

#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>

namespace moe::storage {

// `text` for a one-line message: every control character (a newline from a file name or a file's header, an
// escape sequence) written as \xNN, so that what a file holds cannot break or forge the message it is quoted in.
std::string one_line(std::string_view text);

// One line naming the path (paths and file contents quoted in it through one_line).
class StorageError : public std::runtime_error {
 public:
  explicit StorageError(const std::string& what) : std::runtime_error(one_line(what)) {}
};

// Creates or truncates `path`, writes `bytes` and fsyncs the file before returning.
void write_file_synced(const std::filesystem::path& path, std::string_view bytes);

// fsync of a folder: makes the entries created, renamed or removed in it durable.
void sync_directory(const std::filesystem::path& dir);

// "a directory", "a FIFO", "a symbolic link", "a character device", ... (for messages); "missing" if nothing is there.
std::string file_kind(const std::filesystem::path& path, bool follow_symlinks = true);

// A regular file opened for reading. The type is checked with stat() before open() (a FIFO or a device is never
// opened: opening a FIFO blocks until a writer appears) and again with fstat() on the open descriptor (the path
// may have changed in between). Refusals read "<path>: is not a regular file (it is a FIFO)" or "<path>: missing".
class RegularFile {
 public:
  explicit RegularFile(const std::filesystem::path& path);
  ~RegularFile();
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;

  std::uint64_t size() const { return size_; }
  // Exactly `n` bytes from the start (StorageError when the file is shorter).
  void read(char* out, std::size_t n);
  // The whole file; refused above `limit` bytes (metadata, not tensors).
  std::string read_all(std::uint64_t limit = std::uint64_t{1} << 30);

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

// `name` comes from untrusted metadata and names a file of `folder`. It must be a plain file name (not empty, no
// '/', not "." or "..", no NUL); a symbolic link is followed only when it resolves inside `folder`. Returns
// folder / name; `what` names the folder in refusals ("the checkpoint folder"). Whether the file is a regular file
// is RegularFile's check.
std::filesystem::path confined_file(const std::filesystem::path& folder, const std::string& name,
                                    const std::string& what);

}  // namespace moe::storage
