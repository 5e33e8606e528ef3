// Scratch folders for the golden tests: an empty temporary folder, or a private copy of a case to corrupt, each
// removed when it goes out of scope. A folder's name holds its test file's prefix and a tag, because the golden
// test binaries run in parallel and must not share one.
#pragma once

#include <filesystem>
#include <string>

namespace moe::test {

struct TempDir {
  TempDir(const std::string& prefix, const std::string& tag)
      : path(std::filesystem::temp_directory_path() / ("moe_golden_" + prefix + "_" + tag)) {
    std::filesystem::remove_all(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::filesystem::path path;
};

// A copy of the folder `from` (a committed case).
struct CaseCopy : TempDir {
  CaseCopy(const std::filesystem::path& from, const std::string& prefix, const std::string& tag)
      : TempDir(prefix, tag) {
    std::filesystem::copy(from, path);
  }
};

}  // namespace moe::test
