#include "fuzz/fuzz_support.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <system_error>
#include <unistd.h>

namespace moe::fuzz {

void finding(const std::string& what) {
  std::fprintf(stderr, "fuzz finding: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

namespace {

std::filesystem::path make_scratch_dir() {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path base = fs::is_directory("/dev/shm", ec) ? fs::path("/dev/shm") : fs::temp_directory_path();
  const fs::path dir = base / ("moe-fuzz." + std::to_string(::getpid()));
  fs::remove_all(dir, ec);
  fs::create_directories(dir, ec);
  if (ec) {
    std::fprintf(stderr, "fuzz harness: cannot create %s: %s\n", dir.c_str(), ec.message().c_str());
    std::abort();
  }
  return dir;
}

void remove_scratch_dir() {
  std::error_code ec;
  std::filesystem::remove_all(scratch_dir(), ec);
}

}  // namespace

const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = make_scratch_dir();
  // Registered after dir's destructor, so run before it. libFuzzer ends a timed run with exit(), which runs it; a
  // crash leaves the folder behind (it holds the files of the crashing input, which helps).
  static const bool cleaned_at_exit = std::atexit(remove_scratch_dir) == 0;
  (void)cleaned_at_exit;
  return dir;
}

void write_file(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) {
    std::fprintf(stderr, "fuzz harness: cannot write %s\n", path.c_str());
    std::abort();
  }
}

std::uint64_t fnv1a(std::string_view bytes) {
  std::uint64_t h = 1469598103934665603ULL;  // the FNV-1a 64-bit offset basis and prime
  for (const char c : bytes) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
  return h;
}

}  // namespace moe::fuzz
