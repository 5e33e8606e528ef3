#include "golden/case_json.hpp"

#include "formats/strict_json.hpp"

#include <nlohmann/json.hpp>

namespace moe::golden {

using nlohmann::json;

std::string_view CaseHeader::format() const {
  return config.semantics.intended() && !padding_mask && written_by.empty() ? kCaseFormat : kCaseFormatV2;
}

std::string case_format_of(const json& root, const std::string& origin) {
  if (!root.is_object()) throw CaseFormatError(origin + " must be a JSON object");
  const auto it = root.find("format");
  if (it == root.end() || it->is_null())
    throw CaseFormatError(origin + ": no 'format' (expected \"" + std::string(kCaseFormat) + "\")");
  if (!it->is_string()) throw CaseFormatError(origin + ": 'format' must be a string");
  return it->get<std::string>();
}

CaseHeader case_header_from_json(const json& root, const std::string& origin) {
  const std::string version = case_format_of(root, origin);
  if (version != kCaseFormat && version != kCaseFormatV2) {
    throw CaseFormatError(origin + ": case format '" + version + "' is not supported; this build reads '" +
                          std::string(kCaseFormat) + "' and '" + std::string(kCaseFormatV2) + "'" +
                          (version.rfind("moe-golden/", 0) == 0 ? " (written by a newer release?)" : ""));
  }
  formats::StrictObject top(root, origin);
  top.find("format");
  CaseHeader h;
  h.description = top.optional_string("description").value_or("");
  if (version == kCaseFormatV2) h.written_by = top.optional_string("written_by").value_or("");
  try {
    h.config = formats::config_from_json(top.required("config"), version == kCaseFormatV2);
  } catch (const std::invalid_argument& e) {  // MoeConfig::validate and the enum parsers
    throw CaseFormatError(origin + ": " + e.what());
  } catch (const CaseFormatError& e) {
    throw CaseFormatError(origin + ": " + e.what());
  }
  formats::StrictObject shape(top.required("shape"), origin + ": shape");
  h.seq = shape.integer("seq", shape.required("seq"));
  h.batch = shape.integer("batch", shape.required("batch"));
  shape.reject_unknown();
  if (h.seq <= 0 || h.batch <= 0) throw CaseFormatError(origin + ": shape seq and batch must be > 0");
  h.tolerance = tolerance_from(top, origin);
  top.reject_unknown();
  return h;
}

nlohmann::ordered_json case_header_to_json(const CaseHeader& h) {
  nlohmann::ordered_json j;
  j["format"] = std::string(h.format());
  j["description"] = h.description;
  if (!h.written_by.empty()) j["written_by"] = h.written_by;
  j["config"] = formats::config_to_json(h.config);
  if (h.format() == kCaseFormatV2) j["config"]["semantics"] = h.config.semantics.spec();
  j["shape"]["seq"] = h.seq;
  j["shape"]["batch"] = h.batch;
  j["tolerance"]["rtol"] = h.tolerance.rtol;
  j["tolerance"]["atol"] = h.tolerance.atol;
  return j;
}

Tolerance tolerance_from(formats::StrictObject& top, const std::string& origin) {
  formats::StrictObject tol(top.required("tolerance"), origin + ": tolerance");
  Tolerance t;
  t.rtol = tol.number("rtol", tol.required("rtol"));
  t.atol = tol.number("atol", tol.required("atol"));
  tol.reject_unknown();
  if (t.rtol < 0 || t.atol < 0) throw CaseFormatError(origin + ": tolerances must be >= 0");
  // A case may tighten its check, never loosen it: with rtol 1e300 every wrong output would pass. The bound is
  // the table's row for golden cases (their outputs are the oracle's, in double).
  const Tolerance bound = moe::tolerance(Compared::golden_case, Precision::float64);
  if (t.rtol > bound.rtol || t.atol > bound.atol) {
    const auto num = [](double x) { return nlohmann::json(x).dump(); };
    throw CaseFormatError(origin + ": tolerance {rtol " + num(t.rtol) + ", atol " + num(t.atol) +
                          "} is looser than the table allows for a golden case (rtol <= " + num(bound.rtol) +
                          ", atol <= " + num(bound.atol) + "): a case cannot loosen its own check");
  }
  return t;
}

}  // namespace moe::golden
