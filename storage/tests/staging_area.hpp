// A private folder holding a staged target `area/out` for the storage tests, removed when the test ends: what is
// beside the target (staging and old folders), and versions of it written through StagedDirectory.
#pragma once

#include "storage/durable_files.hpp"
#include "storage/staged_directory.hpp"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>

namespace moe::storage::fixture {

namespace fs = std::filesystem;

inline std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline bool txt_file(const fs::directory_entry& e) {
  return fs::is_regular_file(e.symlink_status()) && e.path().extension() == ".txt";
}

struct Area {
  explicit Area(const std::string& tag) : root(fs::temp_directory_path() / ("moe_storage_test_" + tag)) {
    fs::remove_all(root);
    fs::create_directories(root / "area");
  }
  ~Area() { fs::remove_all(root); }
  Area(const Area&) = delete;
  Area& operator=(const Area&) = delete;
  fs::path target() const { return root / "area" / "out"; }
  std::set<std::string> beside() const {
    std::set<std::string> names;
    for (const auto& e : fs::directory_iterator(root / "area"))
      if (e.path() != target()) names.insert(e.path().filename().string());
    return names;
  }
  // Writes version `text` of the target: a.txt always, b.txt only in version "1".
  void write(const std::string& text) const {
    StagedDirectory staged(target(), txt_file, "test");
    write_file_synced(staged.path() / "a.txt", text);
    if (text == "1") write_file_synced(staged.path() / "b.txt", text);
    staged.commit();
  }
  fs::path root;
};

}  // namespace moe::storage::fixture
