#include "fuzz/known_defects.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace moe::fuzz {

bool plain_file_name(std::string_view name) {
  if (name.empty() || name.size() > 255 || name == "." || name == "..") return false;
  for (const char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

namespace known {
namespace {

using nlohmann::json;

// An integer in [0, 2^31): what an offset or shape of a real checkpoint is.
bool small_count(const json& v) {
  if (v.is_number_unsigned()) return v.get<std::uint64_t>() < (std::uint64_t{1} << 31);
  if (v.is_number_integer()) return v.get<std::int64_t>() >= 0 && v.get<std::int64_t>() < (std::int64_t{1} << 31);
  return !v.is_number_float();  // a string or an object is refused by the loader's type check
}

bool bad_pair(const json& piece, const char* key) {
  const auto it = piece.find(key);
  if (it == piece.end() || !it->is_array()) return false;  // absent or not an array: a type error the loader catches
  return it->size() != 2 || !small_count((*it)[0]) || !small_count((*it)[1]);
}

}  // namespace

bool npy_zero_elements(std::string_view bytes) {
  if (bytes.size() < 10) return false;
  const std::size_t header_len =
      static_cast<unsigned char>(bytes[8]) | (static_cast<std::size_t>(static_cast<unsigned char>(bytes[9])) << 8);
  const std::string_view header = bytes.substr(10, header_len);
  const std::size_t open = header.find('(');
  if (open == std::string_view::npos) return false;
  bool digits = false, all_zero = true;
  for (std::size_t i = open + 1; i < header.size(); ++i) {
    const char c = header[i];
    if (c >= '0' && c <= '9') {
      digits = true;
      all_zero = all_zero && c == '0';
      continue;
    }
    if (digits && all_zero) return true;  // a dimension written with zeros only
    if (c == ')') return false;
    digits = false;
    all_zero = true;
  }
  return false;
}

bool model_case_world_overflows(const json& root) {
  if (!root.is_object() || !root.contains("layout") || !root["layout"].is_object()) return false;
  const json& layout = root["layout"];
  long long product = 1;
  for (const char* key : {"tp", "cp", "dp"}) {
    const auto it = layout.find(key);
    if (it == layout.end() || !it->is_number_integer()) continue;
    const long long v = it->get<std::int64_t>();
    if (v <= 0 || v > std::numeric_limits<int>::max()) return false;  // refused as not an int >= 1 before layout()
    product *= v;
    if (product > std::numeric_limits<int>::max()) return true;
  }
  return false;
}

bool checkpoint_hits_known_defect(const json& meta, std::string_view piece) {
  // checkpoint-values: a replaced piece holding NaN, ±Inf or a double an int64 cannot hold.
  for (std::size_t i = 0; i + 8 <= piece.size(); i += 8) {
    double v = 0;
    std::memcpy(&v, piece.data() + i, 8);
    if (!std::isfinite(v) || std::fabs(v) >= 0x1p62) return true;
  }
  if (!meta.is_object()) return false;
  for (const char* key : {"optimizer_step", "training_step"}) {
    const auto it = meta.find(key);
    if (it != meta.end() && it->is_number_float()) return true;
  }
  const auto pieces = meta.find("pieces");
  if (pieces == meta.end() || !pieces->is_array()) return false;
  for (const json& p : *pieces) {
    if (!p.is_object()) continue;
    const auto file = p.find("file");
    if (file != p.end() && file->is_string() && !plain_file_name(file->get<std::string>())) return true;
    if (bad_pair(p, "offset") || bad_pair(p, "shape")) return true;
    const auto sum = p.find("fnv1a");
    if (sum != p.end() && sum->is_number_float()) return true;
  }
  return false;
}

}  // namespace known
}  // namespace moe::fuzz
