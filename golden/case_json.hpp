// case.json of the golden case format, version 1 (DESIGN.md §5): its top level, and the `config` object <->
// moe::MoeConfig. Reading is strict: an unknown key at any level, a wrong JSON type or a missing required key is
// a CaseFormatError naming it, and a `format` other than "moe-golden/1" is refused naming the version found.
#pragma once

#include "reference/config.hpp"

#include <nlohmann/json_fwd.hpp>

#include <stdexcept>
#include <string>
#include <string_view>

namespace moe::golden {

inline constexpr std::string_view kCaseFormat = "moe-golden/1";

class CaseFormatError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A case passes when every element of every output tensor has |a − b| ≤ atol + rtol·|ref|.
struct Tolerance {
  double rtol = 1e-9;
  double atol = 1e-12;
};

// case.json without the tensors.
struct CaseHeader {
  std::string description;
  MoeConfig config;
  int seq = 0;
  int batch = 0;
  Tolerance tolerance;
};

// Absent or null keys take their defaults; the result is validated (MoeConfig::validate).
MoeConfig config_from_json(const nlohmann::json& config);
// Every key in the order of the §5 example, unset options as null.
nlohmann::ordered_json config_to_json(const MoeConfig& config);

// `origin` names the file in error messages.
CaseHeader case_header_from_json(const nlohmann::json& root, const std::string& origin);
nlohmann::ordered_json case_header_to_json(const CaseHeader& header);

}  // namespace moe::golden
