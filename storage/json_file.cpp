#include "storage/json_file.hpp"

#include <set>
#include <vector>

namespace moe::storage {

nlohmann::json parse_json_text(std::string_view text, const std::string& where) {
  using nlohmann::json;
  // One set of keys per open object, innermost last (arrays push an empty placeholder to keep depths aligned).
  std::vector<std::set<std::string>> open_keys;
  const json::parser_callback_t check = [&](int depth, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (depth >= kMaxJsonDepth) {
          throw StorageError(where + ": nested deeper than " + std::to_string(kMaxJsonDepth) + " arrays or objects");
        }
        open_keys.emplace_back();
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        if (!open_keys.empty()) open_keys.pop_back();
        break;
      case json::parse_event_t::key:
        if (!open_keys.empty() && !open_keys.back().insert(parsed.get<std::string>()).second)
          throw StorageError(where + ": key \"" + parsed.get<std::string>() + "\" appears twice in one object");
        break;
      case json::parse_event_t::value:
        break;
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), check);
  } catch (const json::parse_error& e) {
    // "[json.exception.parse_error.101] parse error at line 1, column 5: …": keep the position and the reason.
    std::string what = e.what();
    const auto at = what.find("parse error");
    throw StorageError(where + ": not valid JSON (" + (at == std::string::npos ? what : what.substr(at)) + ")");
  } catch (const json::exception& e) {
    // The others the parser throws, e.g. out_of_range.406 "number overflow parsing '1e400'": the reason, without
    // the library's tag.
    std::string what = e.what();
    const auto tag_end = what.find("] ");
    throw StorageError(where + ": not valid JSON (" + (tag_end == std::string::npos ? what : what.substr(tag_end + 2)) +
                       ")");
  }
}

nlohmann::json read_json_file(const std::filesystem::path& path, std::uint64_t limit) {
  RegularFile file(path);
  return parse_json_text(file.read_all(limit), path.string());
}

}  // namespace moe::storage
