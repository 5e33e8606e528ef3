// Harness `case_json`: the golden case.json readers on one JSON text — case_header_from_json (layer cases, formats
// moe-golden/1 and /2, the config through config_from_json and MoeConfig::validate) and model_case_header_from_json
// (moe-golden-model/1: model, layout and batch rules). Both readers see every input; each refuses the other's format.
//
// Invariants: the readers throw only CaseFormatError; a layer header they accept, written back with
// case_header_to_json and read again, is written identically (golden write after golden verify changes nothing).
#include "fuzz/fuzz_support.hpp"
#include "golden/case_json.hpp"
#include "golden/model_case.hpp"

#include <nlohmann/json.hpp>

#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace moe;
  const nlohmann::json root = nlohmann::json::parse(fuzz::as_text(data, size), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return 0;  // not JSON: read_case_json refuses it before these readers run

  try {
    const golden::CaseHeader header = golden::case_header_from_json(root, "<fuzz>");
    const std::string written = golden::case_header_to_json(header).dump();
    std::string rewritten;
    try {
      rewritten = golden::case_header_to_json(
                      golden::case_header_from_json(nlohmann::json::parse(written), "<written>"))
                      .dump();
    } catch (const golden::CaseFormatError& e) {
      fuzz::finding(std::string("an accepted case header does not read back: ") + e.what() + "\n" + written);
    }
    if (rewritten != written) fuzz::finding("a case header changes when read back:\n" + written + "\n" + rewritten);
  } catch (const golden::CaseFormatError&) {
  }

  try {
    (void)golden::model_case_header_from_json(root, "<fuzz>");
  } catch (const golden::CaseFormatError&) {
  }
  return 0;
}
