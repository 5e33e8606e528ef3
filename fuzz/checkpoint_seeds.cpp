// Writes the seed corpus of the `checkpoint` harness into the folder given as argument: the real checkpoint of
// checkpoint_model.hpp framed as checkpoint_fuzz.cpp reads it, once with no piece replaced and once per piece file
// (replaced by its own bytes, so every seed loads). Generated at build/run time rather than committed: it follows
// the checkpoint format as it changes.
#include "fuzz/checkpoint_model.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <unistd.h>

namespace fs = std::filesystem;

namespace {

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_seed(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::fprintf(stderr, "checkpoint_seeds: cannot write %s\n", path.c_str());
    std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const fs::path out = argv[1];
  const fs::path checkpoint = fs::temp_directory_path() / ("moe-fuzz-seeds." + std::to_string(::getpid()));
  fs::remove_all(checkpoint);
  moe::fuzz::write_checkpoint(checkpoint);
  fs::create_directories(out);
  const std::string meta = read_bytes(checkpoint / "checkpoint.json");
  write_seed(out / "meta-only", std::string(1, '\0') + meta);
  int written = 1;
  for (const auto& entry : fs::directory_iterator(checkpoint)) {
    const std::string name = entry.path().filename().string();
    if (name == "checkpoint.json") continue;
    write_seed(out / ("piece-" + name), std::string(1, '\1') + meta + '\0' + name + '\0' + read_bytes(entry.path()));
    ++written;
  }
  fs::remove_all(checkpoint);
  std::printf("checkpoint_seeds: %d seeds in %s\n", written, out.c_str());
  return 0;
}
