// Strict reading of one JSON object (a case's, a dump's, a model file's): every key read is remembered, so that
// whatever was not asked for can be refused as unknown; a wrong type is a FormatError naming the key and where it is.
#pragma once

#include "formats/format_error.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <set>
#include <string>

namespace moe::formats {

// Reads the keys of one JSON object, remembering which were consumed so the rest can be reported as unknown.
class StrictObject {
 public:
  StrictObject(const nlohmann::json& object, std::string where) : object_(object), where_(std::move(where)) {
    if (!object_.is_object()) throw FormatError(where_ + " must be a JSON object");
  }

  // nullptr when the key is absent or null.
  const nlohmann::json* find(const std::string& key) {
    known_.insert(key);
    const auto it = object_.find(key);
    return it == object_.end() || it->is_null() ? nullptr : &*it;
  }

  const nlohmann::json& required(const std::string& key) {
    const nlohmann::json* v = find(key);
    if (!v) throw FormatError(where_ + ": required key '" + key + "' is missing");
    return *v;
  }

  int integer(const std::string& key, const nlohmann::json& v) {
    if (!v.is_number_integer() || v.get<std::int64_t>() < std::numeric_limits<int>::min() ||
        v.get<std::int64_t>() > std::numeric_limits<int>::max()) {
      throw FormatError(where_ + ": '" + key + "' must be an integer");
    }
    return v.get<int>();
  }
  int integer(const std::string& key, int fallback) {
    const nlohmann::json* v = find(key);
    return v ? integer(key, *v) : fallback;
  }
  double number(const std::string& key, const nlohmann::json& v) {
    if (!v.is_number() || !std::isfinite(v.get<double>())) {
      throw FormatError(where_ + ": '" + key + "' must be a finite number");
    }
    return v.get<double>();
  }
  double number(const std::string& key, double fallback) {
    const nlohmann::json* v = find(key);
    return v ? number(key, *v) : fallback;
  }
  std::optional<double> optional_number(const std::string& key) {
    const nlohmann::json* v = find(key);
    return v ? std::optional<double>(number(key, *v)) : std::nullopt;
  }
  bool boolean(const std::string& key, bool fallback) {
    const nlohmann::json* v = find(key);
    if (!v) return fallback;
    if (!v->is_boolean()) throw FormatError(where_ + ": '" + key + "' must be true or false");
    return v->get<bool>();
  }
  std::string string(const std::string& key, const nlohmann::json& v) {
    if (!v.is_string()) throw FormatError(where_ + ": '" + key + "' must be a string");
    return v.get<std::string>();
  }
  std::optional<std::string> optional_string(const std::string& key) {
    const nlohmann::json* v = find(key);
    return v ? std::optional<std::string>(string(key, *v)) : std::nullopt;
  }

  // Call after every key was read: any key not asked for is an error.
  void reject_unknown() const {
    for (const auto& [key, value] : object_.items()) {
      if (!known_.count(key)) throw FormatError(where_ + ": unknown key '" + key + "'");
    }
  }

 private:
  const nlohmann::json& object_;
  std::string where_;
  std::set<std::string> known_;
};

}  // namespace moe::formats
