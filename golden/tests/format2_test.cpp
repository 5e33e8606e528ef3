// Format 2 of the layer cases: the "semantics" key and the optional padding_mask input — read strictly, written only
// when used (a format-1 case stays byte for byte what it was), and each one actually reaching the oracle (flipping
// the semantics or dropping the mask of a committed case makes its verification fail).
#include "golden/case_compare.hpp"
#include "golden/case_json.hpp"
#include "golden/case_oracle.hpp"
#include "golden/golden_case.hpp"
#include "reference/tests/expect_error.hpp"

#include "golden/tests/case_copy.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace moe::golden {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kCases = GOLDEN_CASES_DIR;

json minimal_config() {
  return {{"hidden", 8}, {"num_experts", 4}, {"topk", 2}, {"ffn_hidden", 4}, {"score_function", "sigmoid"}};
}

json case_json(const std::string& format, const json& config) {
  return {{"format", format}, {"description", "t"}, {"config", config},
          {"shape", {{"seq", 4}, {"batch", 2}}}, {"tolerance", {{"rtol", 1e-9}, {"atol", 1e-12}}}};
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A private copy of a committed case to corrupt, removed when the test ends.
struct CaseCopy : test::CaseCopy {
  CaseCopy(const std::string& name, const std::string& tag) : test::CaseCopy(kCases / name, "format2_test", tag) {}
};

// The tensors that fail verification of `c` against the oracle.
std::vector<std::string> failing(const GoldenCase& c) {
  std::vector<std::string> names;
  for (const auto& t : compare_outputs(c, oracle_outputs(c.header.config, oracle_inputs(c))))
    if (!t.pass()) names.push_back(t.name);
  return names;
}

TEST(Format2, SemanticsKeyIsReadAndWrittenBack) {
  json config = minimal_config();
  config["semantics"] = "megatron-core-0.19,-router-counts-padding";
  const CaseHeader h = case_header_from_json(case_json("moe-golden/2", config), "case.json");
  EXPECT_EQ(h.config.semantics, Semantics::parse("megatron-core-0.19,-router-counts-padding"));
  EXPECT_EQ(h.format(), "moe-golden/2");
  const json back = json::parse(case_header_to_json(h).dump());
  EXPECT_EQ(back.at("format"), "moe-golden/2");
  EXPECT_EQ(back.at("config").at("semantics"), "megatron-core-0.19,-router-counts-padding");
  // Absent = intended; a padding mask alone makes a format-2 case, which then names its semantics.
  CaseHeader intended = case_header_from_json(case_json("moe-golden/2", minimal_config()), "case.json");
  EXPECT_TRUE(intended.config.semantics.intended());
  EXPECT_EQ(intended.format(), "moe-golden/1");
  intended.padding_mask = true;
  EXPECT_EQ(json::parse(case_header_to_json(intended).dump()).at("config").at("semantics"), "intended");
}

TEST(Format2, UnknownSemanticsIsRefusedInOneLineNamingTheKey) {
  json config = minimal_config();
  config["semantics"] = "megatron-core-0.18";
  const std::string what = test::expect_error<CaseFormatError>(
      "case.json: config: 'semantics': unknown semantics profile 'megatron-core-0.18'",
      [&] { case_header_from_json(case_json("moe-golden/2", config), "case.json"); });
  EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  config["semantics"] = "intended,+no-such-deviation";
  test::expect_error<CaseFormatError>("'semantics': unknown deviation 'no-such-deviation'", [&] {
    case_header_from_json(case_json("moe-golden/2", config), "case.json");
  });
  config["semantics"] = 3;
  test::expect_error<CaseFormatError>("'semantics' must be a string", [&] {
    case_header_from_json(case_json("moe-golden/2", config), "case.json");
  });
}

TEST(Format2, SemanticsIsNotAFormat1Key) {
  json config = minimal_config();
  config["semantics"] = "intended";
  test::expect_error<CaseFormatError>("config: unknown key 'semantics'", [&] {
    case_header_from_json(case_json("moe-golden/1", config), "case.json");
  });
}

// Every committed case reads and writes back to the very bytes of its case.json: format-1 cases stay format 1 (no
// semantics key), format-2 cases keep theirs. A writer that always wrote format 2 fails here.
TEST(Format2, CommittedCaseJsonWritesBackByteForByte) {
  int format2 = 0, format1 = 0;
  for (const auto& entry : fs::directory_iterator(kCases)) {
    const json root = json::parse(read_text(entry.path() / "case.json"));
    if (root.at("format").get<std::string>().rfind("moe-golden/", 0) != 0) continue;  // model cases
    const GoldenCase c = read_case(entry.path());
    EXPECT_EQ(case_header_to_json(c.header).dump(2) + "\n", read_text(entry.path() / "case.json")) << entry.path();
    (c.header.format() == kCaseFormatV2 ? format2 : format1) += 1;
  }
  EXPECT_GE(format1, 33);
  EXPECT_GE(format2, 8);
}

TEST(Format2, PaddingMaskOfTheWrongShapeOrTypeIsRefused) {
  const CaseCopy copy("seq_aux_padding", "mask_shape");
  formats::write_npy(copy.path / "padding_mask.npy",
                     formats::NpyArray::of_booleans({17}, std::vector<std::uint8_t>(17, 0)));
  test::expect_error<CaseFormatError>("tensor 'padding_mask' has shape [17], expected [16]",
                                      [&] { read_case(copy.path); });
  formats::write_npy(copy.path / "padding_mask.npy", formats::NpyArray::of_reals({16}, std::vector<double>(16, 0.0)));
  test::expect_error<CaseFormatError>("tensor 'padding_mask' has dtype <f8, expected |b1",
                                      [&] { read_case(copy.path); });
}

TEST(Format2, PaddingMaskInAFormat1CaseIsAnExtraTensor) {
  const CaseCopy copy("seq_aux_loss", "mask_v1");
  formats::write_npy(copy.path / "padding_mask.npy", formats::NpyArray::of_booleans({18}, std::vector<std::uint8_t>(18, 0)));
  test::expect_error<CaseFormatError>("extra tensor 'padding_mask'", [&] { read_case(copy.path); });
}

// The mask reaches the oracle: the committed case passes with it and fails without it (format 2 allows a case
// without a mask, so only the numbers can tell).
TEST(Format2, DroppingThePaddingMaskFailsVerification) {
  const GoldenCase with_mask = read_case(kCases / "seq_aux_padding");
  ASSERT_TRUE(with_mask.header.padding_mask);
  EXPECT_TRUE(failing(with_mask).empty());
  const CaseCopy copy("seq_aux_padding", "mask_dropped");
  fs::remove(copy.path / "padding_mask.npy");
  const GoldenCase without = read_case(copy.path);
  EXPECT_FALSE(without.header.padding_mask);
  const auto names = failing(without);
  EXPECT_NE(std::find(names.begin(), names.end(), "aux_loss"), names.end());
}

// The semantics reach the oracle: every committed case under a Megatron profile fails verification when its
// "semantics" is flipped to intended (and its intended twins pass under their own key: the verify_committed run).
TEST(Format2, FlippingTheSemanticsOfACommittedCaseFailsVerification) {
  int flipped = 0;
  for (const auto& entry : fs::directory_iterator(kCases)) {
    const json root = json::parse(read_text(entry.path() / "case.json"));
    if (root.at("format") != "moe-golden/2" || root.at("config").at("semantics") == "intended") continue;
    GoldenCase c = read_case(entry.path());
    EXPECT_TRUE(failing(c).empty()) << entry.path();
    c.header.config.semantics = Semantics();
    EXPECT_FALSE(failing(c).empty()) << entry.path() << " does not depend on its semantics";
    ++flipped;
  }
  EXPECT_GE(flipped, 4);
}

}  // namespace
}  // namespace moe::golden
