// Harness `config`: formats::config_from_json, the one reader of a layer config (golden cases, model files, dumps and
// the Python binding all use it), and through it MoeConfig::validate. The input is JSON; when it is an object with
// a "config" member (a case.json, a model file, a dump.json) that member is read, so the committed files seed it.
//
// Invariants: only CaseFormatError and std::invalid_argument are thrown; a config read with the "semantics" key,
// written back (config_to_json plus its semantics spec) and read again is the same config; the tensor lists of a
// golden case (input_tensor_names, output_tensor_names) can be made for every config validate() accepts.
#include "fuzz/fuzz_support.hpp"
#include "golden/case_json.hpp"
#include "golden/golden_case.hpp"

#include <nlohmann/json.hpp>

#include <stdexcept>
#include <string>

namespace {

std::string written(const moe::MoeConfig& c) {
  nlohmann::ordered_json j = moe::formats::config_to_json(c);
  j["semantics"] = c.semantics.spec();
  return j.dump();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace moe;
  const nlohmann::json root = nlohmann::json::parse(fuzz::as_text(data, size), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return 0;
  const nlohmann::json& object = root.is_object() && root.contains("config") ? root["config"] : root;

  for (const bool semantics_key : {true, false}) {
    MoeConfig config;
    try {
      config = formats::config_from_json(object, semantics_key);
    } catch (const golden::CaseFormatError&) {
      continue;
    } catch (const std::invalid_argument&) {
      continue;
    }
    const std::string once = written(config);
    std::string twice;
    try {
      twice = written(formats::config_from_json(nlohmann::json::parse(once), true));
    } catch (const std::exception& e) {
      fuzz::finding(std::string("an accepted config does not read back: ") + e.what() + "\n" + once);
    }
    if (twice != once) fuzz::finding("a config changes when read back:\n" + once + "\n" + twice);
    if (golden::input_tensor_names(config).empty() || golden::output_tensor_names(config).empty())
      fuzz::finding("a valid config has no tensors:\n" + once);
  }
  return 0;
}
