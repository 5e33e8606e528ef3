// What the two dump harnesses (compare_dump, step_dump) share: a scratch copy of a committed dump, and the framed
// input applied to it and undone after each run — the metadata file's text, then optionally NUL, a path under the
// dump ("rank1/router.weight", "inputs/head"), NUL and that file's bytes, written as PATH.npy when the path is plain.
#pragma once

#include "fuzz/fuzz_support.hpp"

#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <string_view>

namespace moe::fuzz {

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// `committed` copied into the scratch folder as `name`, once per process.
inline std::filesystem::path scratch_copy(const std::filesystem::path& committed, const std::string& name) {
  const std::filesystem::path d = scratch_dir() / name;
  std::filesystem::remove_all(d);
  std::filesystem::copy(committed, d, std::filesystem::copy_options::recursive);
  return d;
}

// Puts back, when it goes, the file an input replaced (or removes the one it added).
struct Restore {
  std::filesystem::path path;
  std::string bytes;
  bool existed = false;
  Restore() = default;
  Restore(const Restore&) = delete;
  Restore& operator=(const Restore&) = delete;
  ~Restore() {
    if (path.empty()) return;
    if (existed) write_file(path, bytes);
    else std::filesystem::remove(path);
  }
  void replace(const std::filesystem::path& p, std::string_view with) {
    path = p;
    existed = std::filesystem::exists(p);
    if (existed) bytes = slurp(p);
    write_file(p, with);
  }
};

// One input applied to the dump in `dir`: `meta` (dump.json, step.json) replaced by the text before the first NUL,
// and the framed file, when `plain` accepts its path. Both are put back when this goes.
class FramedInput {
 public:
  FramedInput(const std::filesystem::path& dir, const std::string& meta, std::string_view input,
              const std::function<bool(std::string_view)>& plain) {
    const auto cut = input.find('\0');
    meta_.replace(dir / meta, input.substr(0, cut));
    if (cut == std::string_view::npos) return;
    const std::string_view rest = input.substr(cut + 1);
    const auto cut2 = rest.find('\0');
    const std::string_view name = rest.substr(0, cut2);
    if (cut2 != std::string_view::npos && plain(name)) file_.replace(dir / (std::string(name) + ".npy"), rest.substr(cut2 + 1));
  }

 private:
  Restore meta_, file_;
};

}  // namespace moe::fuzz
