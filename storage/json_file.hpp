// JSON from files no one here wrote (dump.json, a Hugging Face config.json, a golden case config): one reader with
// the limits every such file gets, so that no command can be made to overflow its stack, take all memory or block.
//   - the file is a regular file (a FIFO or device is refused, never opened: RegularFile) of at most `limit` bytes;
//   - arrays and objects nest at most kMaxJsonDepth deep: the printers and every reader that walks a value
//     recurse, so a 200,000-deep `[[[[…` is refused while parsing, before anything walks it;
//   - a key given twice in one object is refused (nlohmann keeps the last silently; the user meant one of them).
// Errors are StorageError, one line naming the file (or `where`).
#pragma once

#include "storage/durable_files.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace moe::storage {

inline constexpr int kMaxJsonDepth = 64;
inline constexpr std::uint64_t kMaxJsonBytes = std::uint64_t{64} << 20;  // configs and dump headers, not tensors

// `text` parsed under the limits above; `where` names its source in errors.
nlohmann::json parse_json_text(std::string_view text, const std::string& where);

// The file read (regular files only, at most `limit` bytes) and parsed as parse_json_text.
nlohmann::json read_json_file(const std::filesystem::path& path, std::uint64_t limit = kMaxJsonBytes);

}  // namespace moe::storage
