// The smoke driver: a main() for a harness where libFuzzer is not linked (the default gcc build), so that ctest
// replays the corpus and the fixed crashers through every harness without clang.
//
//   fuzz_<harness>_replay [--ext .npy] PATH...
//
// A file is one input. A folder is walked recursively in name order, skipping, with --ext, every file not ending in
// it. The inputs run
// in one process, as libFuzzer runs them, so state a harness keeps between inputs is exercised too. Exit 0 when
// every input returned; a crash (abort, sanitizer report, uncaught exception) ends the process with the input
// named on stderr. No input at all is an error, so that a moved corpus cannot pass by replaying nothing.
#include "fuzz/fuzz_support.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

void collect(const fs::path& root, const std::string& ext, std::vector<fs::path>& out) {
  if (fs::is_regular_file(root)) {
    out.push_back(root);
    return;
  }
  if (!fs::is_directory(root)) {
    std::fprintf(stderr, "replay: %s is neither a file nor a folder\n", root.c_str());
    std::exit(2);
  }
  std::vector<fs::path> files;
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator(); ++it) {
    if (!it->is_regular_file()) continue;
    const std::string name = it->path().filename().string();
    if (name == "README.md" || name == "NOTES.md") continue;  // notes beside the crashers
    if (!ext.empty() && (name.size() < ext.size() || name.compare(name.size() - ext.size(), ext.size(), ext) != 0))
      continue;
    files.push_back(it->path());
  }
  std::sort(files.begin(), files.end());
  out.insert(out.end(), files.begin(), files.end());
}

}  // namespace

int main(int argc, char** argv) {
  std::string ext;
  std::vector<fs::path> inputs;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--ext" && i + 1 < argc) {
      ext = argv[++i];
      continue;
    }
    collect(arg, ext, inputs);
  }
  if (inputs.empty()) {
    std::fprintf(stderr, "replay: no input found (usage: %s [--ext .npy] PATH...)\n", argc > 0 ? argv[0] : "replay");
    return 2;
  }
  for (const fs::path& path : inputs) {
    std::ifstream in(path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) {
      std::fprintf(stderr, "replay: cannot read %s\n", path.c_str());
      return 2;
    }
    // Named before the call: a crash prints nothing after it.
    std::fprintf(stderr, "replay: %s\n", path.c_str());
    LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
  }
  std::printf("replayed %zu inputs\n", inputs.size());
  return 0;
}
