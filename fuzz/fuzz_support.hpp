// What every harness of fuzz/ shares (README.md): the libFuzzer entry point, findings the sanitizers cannot see
// (a broken invariant: printed, then abort, so that libFuzzer and the replay driver both report a crash), and a
// private scratch folder for the harnesses whose reader takes a path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

// Defined once per harness; libFuzzer calls it (clang, MOE_FUZZ=ON), and so does replay_main.cpp (every build).
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace moe::fuzz {

// The fuzz input as text (the readers take std::string_view or std::string).
inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// A broken invariant of the reader under test: prints "fuzz finding: <what>" and aborts.
[[noreturn]] void finding(const std::string& what);

// A folder of this process only (under /dev/shm when there is one: the path-based readers then read memory, not
// disk), created on first use and removed at exit.
const std::filesystem::path& scratch_dir();

// Writes `bytes` to `path`, replacing it; aborts (a harness error, not a finding) when it cannot.
void write_file(const std::filesystem::path& path, std::string_view bytes);

// 64-bit FNV-1a of `bytes`, the checksum checkpoint.json gives every piece file.
std::uint64_t fnv1a(std::string_view bytes);

}  // namespace moe::fuzz
