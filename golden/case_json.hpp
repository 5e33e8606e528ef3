// case.json of the golden layer-case format (golden/README.md), versions 1 and 2: its top level (the `config`
// object is formats/config_json.hpp's). Version 2 adds the config key "semantics" (a spec string, absent =
// "intended") and the optional input padding_mask [T]. Reading is strict: an unknown key at any level (in version 1:
// "semantics" too), a wrong JSON type or a missing required key is a CaseFormatError naming it, and a `format` other
// than these two is refused naming the version found. Writing picks version 2 only when the case uses a version-2
// feature, so a version-1 case is written exactly as before.
#pragma once

#include "formats/config_json.hpp"
#include "formats/format_error.hpp"
#include "reference/tolerance.hpp"

#include <nlohmann/json_fwd.hpp>

#include <string>
#include <string_view>

namespace moe::formats {
class StrictObject;
}  // namespace moe::formats

namespace moe::golden {

inline constexpr std::string_view kCaseFormat = "moe-golden/1";
inline constexpr std::string_view kCaseFormatV2 = "moe-golden/2";

// A case that does not follow its format; the readers of formats/ that a case is read with throw the same type.
using CaseFormatError = formats::FormatError;

// case.json without the tensors.
struct CaseHeader {
  std::string description;
  MoeConfig config;  // config.semantics: format 2's "semantics"
  int seq = 0;
  int batch = 0;
  // A case passes when every element of every output tensor has |a − b| ≤ atol + rtol·|ref|.
  Tolerance tolerance = moe::tolerance(Compared::golden_case, Precision::float64);
  // Format 2: the case holds the input padding_mask [T]. Not a key of case.json: read_case sets it from the files.
  bool padding_mask = false;
  // Format 2's optional "written_by": the release (or generator) that wrote the case, e.g. "moe-oracle 0.4.0", so
  // that a regression across releases can say which one changed what. Empty: not recorded (every format-1 case).
  std::string written_by{};

  // The version a writer gives the case: 2 only when it uses semantics other than intended, a padding mask or
  // records its writer.
  std::string_view format() const;
};

// `origin` names the file in error messages. Accepts formats 1 and 2 (header.padding_mask stays false).
CaseHeader case_header_from_json(const nlohmann::json& root, const std::string& origin);
// The format named by a case.json's "format" key, checked to be a string (CaseFormatError naming the file if not).
std::string case_format_of(const nlohmann::json& root, const std::string& origin);
// Format header.format(); in format 2 the config ends with "semantics": header.config.semantics.spec().
nlohmann::ordered_json case_header_to_json(const CaseHeader& header);

// A case's "tolerance": {"rtol": …, "atol": …}, both required, >= 0 and no looser than the table's golden-case row.
Tolerance tolerance_from(formats::StrictObject& top, const std::string& origin);

}  // namespace moe::golden
